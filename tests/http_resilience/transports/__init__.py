"""Tests of http_resilience._transports."""
