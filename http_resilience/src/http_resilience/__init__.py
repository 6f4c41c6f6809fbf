"""Resilient httpx transports (skeleton: the strategies arrive with their own issues)."""

__all__: list[str] = []
