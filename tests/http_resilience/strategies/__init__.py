"""Tests of http_resilience._strategies."""
