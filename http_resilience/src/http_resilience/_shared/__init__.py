"""Resilience state shared by many replicas through Redis (the ``redis`` extra)."""
