"""Fallback: a ``@fallback`` query answers degraded when its chain gives up."""
