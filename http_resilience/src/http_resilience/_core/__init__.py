"""The pipeline's core: the seam strategies compose on, and what they share.

The handler seam and the builder, the clock, durations, failure classification,
``Retry-After``, host keys, events, telemetry and errors. Nothing here knows a
strategy by name.
"""
