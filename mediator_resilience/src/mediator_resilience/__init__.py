"""Opt-in retry for the mediator.

A skeleton: the `@retryable` behavior arrives with its own issue.
"""

__all__: list[str] = []
