"""Tests of http_resilience._clients: the clients, named clients and the factory."""
