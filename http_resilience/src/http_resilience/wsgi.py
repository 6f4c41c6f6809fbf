"""WSGI middlewares for services that call others through `http_resilience`.

The twins of the ASGI ones, for Flask, Django and any WSGI server, with the
same options and answers:

- `ResilienceContextMiddleware` carries a trusted caller's deadline
  (``X-Request-Timeout-Ms``), retry marker (``X-Retry-Attempt``) and
  correlation id into the app, for its call and while the server reads its
  body: the sync clients' calls made there are cut to the caller's deadline,
  follow its retry and carry its id; a failed answer after a call that gave
  up on its retries says ``X-Retry-Exhausted: 1``;
- `ResilienceErrorMiddleware` answers the pipeline's errors (a broken
  circuit, a timeout, a limiter) with RFC 9457 problem details.

The web middlewares of `http_resilience` and ``mediator.wsgi`` go in one
order, outermost first: ``RequestContextMiddleware``,
`ResilienceContextMiddleware`, then ``DomainErrorMiddleware`` and
`ResilienceErrorMiddleware` (these two either way round). Each checks it on
every request: a stack in another order raises `MiddlewareOrderError`,
naming this order, before the app runs.

Example:
    >>> def app(environ, start_response): ...
    >>> wrapped = ResilienceContextMiddleware(
    ...     ResilienceErrorMiddleware(app), default_deadline="10s"
    ... )
"""

from http_resilience._middleware.wsgi import (
    ResilienceContextMiddleware,
    ResilienceErrorMiddleware,
)
from http_resilience.asgi import MiddlewareOrderError

__all__ = [
    "MiddlewareOrderError",
    "ResilienceContextMiddleware",
    "ResilienceErrorMiddleware",
]

from http_resilience._primitives.public_names import publish as _publish

_publish(__name__, __all__)
