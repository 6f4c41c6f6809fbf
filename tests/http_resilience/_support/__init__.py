"""Helpers shared by the http_resilience tests of more than one folder."""
