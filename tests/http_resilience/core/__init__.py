"""Tests of http_resilience._core."""
