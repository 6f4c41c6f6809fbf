"""Tests of http_resilience._streams."""
