"""`RequestContextMiddleware`: each HTTP request's correlation id and principal."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import ClassVar, cast

from mediator._asgi.answers import INTERNAL_ERROR, log_unhandled
from mediator._asgi.inbound import (
    DEFAULT_CORRELATION_HEADER,
    RequestContextOptions,
    checked_principal,
    correlation_from,
)
from mediator._asgi.problem import send_problem
from mediator._asgi.stack import entered_http
from mediator._asgi.types import (
    PRINCIPAL_SCOPE_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
)
from mediator._core.context import (
    MAX_CORRELATION_LENGTH,
    Principal,
    acting_as,
    correlation_id,
)
from mediator._primitives.stack_order import STACK_SCOPE_KEY

__all__ = [
    "DEFAULT_CORRELATION_HEADER",
    "MAX_CORRELATION_LENGTH",
    "PrincipalOf",
    "RequestContextMiddleware",
    "TrustedCaller",
]

_logger = logging.getLogger("mediator.asgi")

PrincipalOf = Callable[[Scope], "Principal | Awaitable[Principal | None] | None"]
"""Who sends the request, read from its ASGI scope; sync or ``async def``."""

TrustedCaller = Callable[[Scope], bool]
"""Whether the caller's own headers are believed, told from its ASGI scope."""


class RequestContextMiddleware(RequestContextOptions[ASGIApp, PrincipalOf, Scope]):
    """Sets each HTTP request's correlation id and principal for its handlers.

    Per ``http`` request, around the wrapped app:

    - the correlation id (`correlation_id`, which audit records carry) is the
      one a trusted caller sent in `correlation_header`, when it sent it once
      and it is 1 to 200 visible ASCII characters without spaces or commas
      (the rule of `correlation_id`); else a new UUID. Else means: none sent,
      one malformed, the header sent twice or a comma in it (HTTP lets a hop
      join two lines into one with commas, so which one is meant is
      unknowable), or a caller `trusted` does not trust. None of these is an
      error. The response carries the id back in the same header, unless the
      app set that header itself;
    - an exception that escapes the app before it began its answer (a bug:
      nothing inside answered it), when this is the outermost of the web
      middlewares (not one in a mounted sub-app's own stack, which leaves it
      to the outer stack), is answered here with an
      ``application/problem+json`` 500 that carries the id too, and never
      the error's text, and logged once, with its traceback, method, path
      and id, on the ``mediator.asgi`` logger at ``ERROR``. It is not raised
      on: the server keeps the connection and logs nothing more, and
      Starlette's ``ServerErrorMiddleware`` (its debug page, a handler for
      500) does not see it; an error tracker reads the log record, or goes
      inside this middleware. An exception after the answer began is
      raised on as it is, for the server to end the answer;
    - the principal (`acting_as`) is what `principal` returns for the
      request's scope, when `principal` is given: None for an anonymous
      caller. It is also left in the scope (under ``"mediator.principal"``),
      so a `DomainErrorMiddleware` outside this one tells 401 from 403.

    Both are reset when the request ends. Tasks the handlers start inherit
    them, as they inherit any context variable. Scopes other than ``http``
    (``websocket``, ``lifespan``) pass through untouched.

    To send the same id on the HTTP calls the handlers make, give
    `http_resilience`'s clients ``correlation=mediator.current_correlation_id``.

    Args:
        app: The ASGI application to wrap.
        principal: Called once per request with its ASGI scope, for the
            principal; a plain function or an ``async def`` one (told apart
            once, here). Put it inside the middleware that authenticates:
            Starlette's ``AuthenticationMiddleware`` leaves ``scope["user"]``.
            None leaves the principal as it is.
        correlation_header: The header the id is read from and echoed in;
            default ``X-Correlation-ID``.
        trusted: Called once per request with its ASGI scope: True when the
            caller may give the correlation id, False when its id is ignored
            and a new one made (an internet client at an edge service, whose
            id would otherwise reach the audit records as it chose it). A
            plain function, not ``async def``: it decides from the scope alone
            (the peer address, TLS details, a header the mesh sets). Give the
            same one to `http_resilience.ResilienceContextMiddleware`. None,
            the default, trusts every caller.

    Raises:
        TypeError: `app`, `principal` or `trusted` is not callable, `trusted`
            is ``async``, or `correlation_header` is not a string. At request
            time: `principal` returned something other than a `Principal` or
            None, or `trusted` something other than True or False.
        ValueError: `correlation_header` is not an HTTP header name.

    Example:
        >>> import asyncio, httpx
        >>> from mediator import Principal, current_correlation_id
        >>> from mediator import current_principal
        >>> async def app(scope, receive, send):
        ...     seen = f"{current_correlation_id()} {current_principal().id}"
        ...     await send({"type": "http.response.start", "status": 200})
        ...     await send({"type": "http.response.body", "body": seen.encode()})
        >>> wrapped = RequestContextMiddleware(
        ...     app, principal=lambda scope: Principal("u-1")
        ... )
        >>> async def main():
        ...     transport = httpx.ASGITransport(app=wrapped)
        ...     async with httpx.AsyncClient(transport=transport) as client:
        ...         response = await client.get(
        ...             "http://shop/", headers={"X-Correlation-ID": "order-42"}
        ...         )
        ...     return response.text, response.headers["X-Correlation-ID"]
        >>> asyncio.run(main())
        ('order-42 u-1', 'order-42')
    """

    _application: ClassVar[str] = "an ASGI application"
    _where: ClassVar[str] = "the ASGI scope"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with the request's correlation id and principal set."""
        if not await entered_http(
            self.app, scope, receive, send, "RequestContextMiddleware"
        ):
            return
        # Only the outermost web middleware answers a bug: one inside another
        # stack's (a mounted sub-app's own) leaves the error to the outer
        # stack, whose error middlewares may still answer it.
        outermost = scope.get(STACK_SCOPE_KEY) == ["RequestContextMiddleware"]
        chosen = self._chosen(scope)
        echoed = chosen.encode("ascii")
        header = self._header
        started = False

        async def echoing(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", ()))
                if all(bytes(name).lower() != header for name, _ in headers):
                    headers.append((header, echoed))
                    message = {**message, "headers": headers}
            await send(message)

        with correlation_id(chosen), ExitStack() as stack:
            if self.principal is not None:
                principal = await self._principal_of(self.principal, scope)
                scope[PRINCIPAL_SCOPE_KEY] = principal
                stack.enter_context(acting_as(principal))
            try:
                await self.app(scope, receive, echoing)
            except Exception as error:
                if started or not outermost:
                    raise
                # A bug: answered here, so that its 500 carries the id too (the
                # server's own, or Starlette's, would not), and logged here,
                # once. Not raised on: uvicorn would log it again and close the
                # connection, failing the next request a client sends on it.
                log_unhandled(_logger, error, scope["method"], scope["path"], chosen)
                with contextlib.suppress(Exception):  # the caller may have left
                    await send_problem(echoing, INTERNAL_ERROR)

    def _inbound(self, request: Scope) -> str | None:
        """The caller's id, when it sent exactly one valid one."""
        header = self._header
        return correlation_from(
            [
                bytes(value)
                for name, value in request.get("headers", ())
                if bytes(name).lower() == header
            ]
        )

    async def _principal_of(self, read: PrincipalOf, scope: Scope) -> Principal | None:
        # Checked whatever the annotations say: the callable is the user's.
        found = cast("object", read(scope))
        if self._awaits or (
            found is not None
            and not isinstance(found, Principal)
            and inspect.isawaitable(found)
        ):
            # A plain callable may still hand back an awaitable (a lambda
            # around an async function): awaited, as an async one is.
            found = await cast("Awaitable[object]", found)
        return checked_principal(found)
