"""WSGI middlewares for web services that send through a mediator.

The twins of `mediator.asgi`'s, for Flask, Django and any WSGI server, with
the same options and answers:

- `DomainErrorMiddleware` answers the domain errors a handler raises with RFC
  9457 problem details (422, 404, 403 or 401, 409, 503, 504);
- `RequestContextMiddleware` sets each request's correlation id (from the
  caller's header, or a new one, echoed on the answer) and its principal,
  for the app's call and while the server reads the body it returns.

Put them in the order of `mediator.asgi`, outermost first:
`RequestContextMiddleware`, `http_resilience.wsgi.ResilienceContextMiddleware`
(when the service uses it), then `DomainErrorMiddleware` and
`http_resilience.wsgi.ResilienceErrorMiddleware` (these two either way
round). Each checks it on every request: a stack in another order raises
`MiddlewareOrderError` naming this one, before the app runs.

Example:
    >>> def app(environ, start_response): ...
    >>> wrapped = RequestContextMiddleware(DomainErrorMiddleware(app))
"""

from mediator._wsgi.domain_errors import DomainErrorMiddleware
from mediator._wsgi.request_context import RequestContextMiddleware
from mediator.asgi import MiddlewareOrderError

__all__ = [
    "DomainErrorMiddleware",
    "MiddlewareOrderError",
    "RequestContextMiddleware",
]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
