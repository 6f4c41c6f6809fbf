"""The public names of `http_resilience.wsgi`, pinned."""

from __future__ import annotations

import http_resilience.asgi
import http_resilience.wsgi


def test_the_public_names_are_pinned() -> None:
    assert http_resilience.wsgi.__all__ == [
        "MiddlewareOrderError",
        "ResilienceContextMiddleware",
        "ResilienceErrorMiddleware",
    ]


def test_the_order_error_is_the_asgi_middlewares_own() -> None:
    assert (
        http_resilience.wsgi.MiddlewareOrderError
        is http_resilience.asgi.MiddlewareOrderError
    )
