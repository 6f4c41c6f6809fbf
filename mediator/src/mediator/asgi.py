"""Pure-ASGI middlewares for web services that send through a mediator.

They take only the ASGI interface, so Starlette, FastAPI and any ASGI server
take them, and `mediator` depends on no web framework:

- `DomainErrorMiddleware` answers the domain errors a handler raises with RFC
  9457 problem details (422, 404, 403 or 401, 409, 503);
- `RequestContextMiddleware` sets each request's correlation id (from the
  caller's header, or a new one, echoed on the answer) and its principal;
- `IdempotencyKeyMiddleware` reads the ``Idempotency-Key`` of POST and PATCH
  requests, sets it for ``@idempotent`` commands, and replays the answer of
  a request already completed with it.

Put them in one order, outermost first: `RequestContextMiddleware`,
`http_resilience.ResilienceContextMiddleware` (when the service uses it),
`IdempotencyKeyMiddleware`, then `DomainErrorMiddleware` and
`http_resilience.ResilienceErrorMiddleware` (these two either way round).
Each of them checks it on every request: a stack in another order raises
`MiddlewareOrderError` naming this one, before the app runs.

Example:
    >>> async def app(scope, receive, send): ...
    >>> wrapped = RequestContextMiddleware(
    ...     IdempotencyKeyMiddleware(DomainErrorMiddleware(app))
    ... )
"""

from mediator._asgi.domain_errors import DomainErrorMiddleware
from mediator._asgi.idempotency.middleware import IdempotencyKeyMiddleware
from mediator._asgi.request_context import RequestContextMiddleware
from mediator._asgi.stack import MiddlewareOrderError

__all__ = [
    "DomainErrorMiddleware",
    "IdempotencyKeyMiddleware",
    "MiddlewareOrderError",
    "RequestContextMiddleware",
]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
