"""Tests of http_resilience._middleware: the ASGI and WSGI middlewares."""
