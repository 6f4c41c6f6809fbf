"""Resilient httpx transports.

A skeleton: the strategies arrive with their own issues.
"""

__all__: list[str] = []
