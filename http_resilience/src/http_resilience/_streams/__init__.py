"""Retry for streams that break half-way, and bodies that resume with ``Range``."""
