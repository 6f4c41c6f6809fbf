"""Opt-in retry for the mediator (skeleton: the behavior arrives with its own issue)."""

__all__: list[str] = []
