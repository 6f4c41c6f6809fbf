"""Named clients above health: the `HttpClientFactory` and what it reports.

The factory keeps named long-lived clients, each over a resilient transport
(`http_resilience._transports`), and answers their health
(`http_resilience._health`), so it sits above both.
"""
