"""Tests of http_resilience._transport: the resilient transports and their seam."""
