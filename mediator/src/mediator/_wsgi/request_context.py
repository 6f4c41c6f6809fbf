"""`RequestContextMiddleware` for WSGI: each request's correlation id and principal."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from functools import cached_property
from typing import ClassVar, cast

from mediator._asgi.answers import INTERNAL_ERROR, log_unhandled
from mediator._asgi.inbound import (
    DEFAULT_CORRELATION_HEADER,
    RequestContextOptions,
    checked_principal,
    correlation_from,
)
from mediator._asgi.types import PRINCIPAL_SCOPE_KEY
from mediator._core.context import Principal, acting_as, correlation_id
from mediator._primitives.stack_order import STACK_SCOPE_KEY
from mediator._primitives.wsgi_context import serve_in_context
from mediator._wsgi.types import (
    StartResponse,
    WatchedStart,
    WSGIApplication,
    WSGIEnvironment,
    enter_stack,
    environ_key,
    header_bytes,
    problem_response,
)

__all__ = [
    "DEFAULT_CORRELATION_HEADER",
    "PrincipalOf",
    "RequestContextMiddleware",
    "TrustedCaller",
]

PrincipalOf = Callable[[WSGIEnvironment], "Principal | None"]
"""Who sends the request, read from its WSGI environ; a plain function."""

TrustedCaller = Callable[[WSGIEnvironment], bool]
"""Whether the caller's own headers are believed, told from its WSGI environ."""

_logger = logging.getLogger("mediator.wsgi")


class RequestContextMiddleware(
    RequestContextOptions[WSGIApplication, PrincipalOf, WSGIEnvironment]
):
    """Sets each WSGI request's correlation id and principal for its handlers.

    The twin of `mediator.asgi.RequestContextMiddleware`, with the same
    options and rules; per request, around the wrapped app and while the
    server reads the body it returns (a streamed answer too):

    - the correlation id (`correlation_id`, which audit records carry) is the
      one a trusted caller sent in `correlation_header`, when it is 1 to 200
      visible ASCII characters without spaces or commas; else a new UUID.
      A header sent twice reaches the app joined with a comma (WSGI servers
      join repeated headers), so it is refused like a comma in one. The
      answer carries the id back in the same header, unless the app set that
      header itself;
    - the principal (`acting_as`) is what `principal` returns for the
      request's environ, when `principal` is given: None for an anonymous
      caller. It is also left in the environ (under ``"mediator.principal"``);
    - an exception the app's call raises (a bug: nothing inside answered it;
      Flask and Django answer their own 500, which carries the id), when
      this is the outermost of the web middlewares, is
      answered with an ``application/problem+json`` 500 that carries the id
      too, and never the error's text, and logged once, with its traceback,
      method, path and id, on the ``mediator.wsgi`` logger at ``ERROR``; it
      is not raised on, so the server logs nothing more. An error raised
      while the server reads the body is the server's, as the answer may be
      half sent.

    Both are reset when the server closes the body. Put this middleware
    outermost: `http_resilience.wsgi.ResilienceContextMiddleware` and the
    error middlewares go inside it, or each request raises
    `MiddlewareOrderError`.

    Args:
        app: The WSGI application to wrap (a Flask app's ``wsgi_app``, a
            Django ``WSGIHandler``).
        principal: Called once per request with its WSGI environ, for the
            principal: a plain function (WSGI has no event loop). Read what
            the server or an outer authenticating middleware verified, such
            as ``environ["REMOTE_USER"]``. None leaves the principal as it is.
        correlation_header: The header the id is read from and echoed in;
            default ``X-Correlation-ID``.
        trusted: Called once per request with its WSGI environ: True when the
            caller may give the correlation id, False when its id is ignored
            and a new one made. A plain function deciding from the environ
            alone (``REMOTE_ADDR``, a header the mesh sets). Give the same
            one to `http_resilience.wsgi.ResilienceContextMiddleware`. None,
            the default, trusts every caller.

    Raises:
        TypeError: `app`, `principal` or `trusted` is not callable, `principal`
            or `trusted` is ``async``, or `correlation_header` is not a
            string. At request time: `principal` returned something other
            than a `Principal` or None, or `trusted` something other than True
            or False.
        ValueError: `correlation_header` is not an HTTP header name.

    Example:
        >>> from wsgiref.util import setup_testing_defaults
        >>> from mediator import Principal, current_correlation_id
        >>> from mediator import current_principal
        >>> def app(environ, start_response):
        ...     start_response("200 OK", [("Content-Type", "text/plain")])
        ...     yield f"{current_correlation_id()} {current_principal().id}".encode()
        >>> wrapped = RequestContextMiddleware(
        ...     app, principal=lambda environ: Principal(environ["REMOTE_USER"])
        ... )
        >>> environ = {"HTTP_X_CORRELATION_ID": "order-42", "REMOTE_USER": "u-1"}
        >>> setup_testing_defaults(environ)
        >>> answered = []
        >>> body = wrapped(environ, lambda status, headers: answered.extend(headers))
        >>> b"".join(body), body.close()
        (b'order-42 u-1', None)
        >>> answered[-1]
        ('X-Correlation-ID', 'order-42')
    """

    _application: ClassVar[str] = "a WSGI application"
    _where: ClassVar[str] = "the WSGI environ"
    _sync_only: ClassVar[str | None] = "a WSGI server runs no event loop"

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app, and read its body, with the correlation id and principal set."""
        enter_stack(environ, "RequestContextMiddleware")
        # Only the outermost web middleware answers a bug (see the ASGI twin).
        outermost = environ.get(STACK_SCOPE_KEY) == ["RequestContextMiddleware"]
        chosen = self._chosen(environ)
        echoing = WatchedStart(start_response, (self.correlation_header, chosen))

        def start(stack: ExitStack) -> Iterable[bytes]:
            stack.enter_context(correlation_id(chosen))
            if self.principal is not None:
                principal = _principal_of(self.principal, environ)
                environ[PRINCIPAL_SCOPE_KEY] = principal
                stack.enter_context(acting_as(principal))
            try:
                return self.app(environ, cast("StartResponse", echoing))
            except Exception as error:
                if not outermost:
                    raise
                # A bug: answered here, so that its 500 carries the id too (the
                # server's own would not), and logged here, once. An answer
                # begun is replaced through exc_info (the server re-raises the
                # error when it already sent it).
                status, headers, body = problem_response(INTERNAL_ERROR)
                echoing(status, headers, sys.exc_info() if echoing.started else None)
                log_unhandled(
                    _logger,
                    error,
                    environ.get("REQUEST_METHOD"),
                    environ.get("PATH_INFO"),
                    chosen,
                )
                return [body]

        return serve_in_context(start)

    @cached_property
    def _key(self) -> str:
        """Where the server puts the correlation header in the environ."""
        return environ_key(self.correlation_header)

    def _inbound(self, request: WSGIEnvironment) -> str | None:
        """The caller's id, when it sent exactly one valid one."""
        found = request.get(self._key)
        if found is None:
            return None
        value = header_bytes(found)
        return None if value is None else correlation_from([value])


def _principal_of(read: PrincipalOf, environ: WSGIEnvironment) -> Principal | None:
    # Checked whatever the annotations say: the callable is the user's.
    found = cast("object", read(environ))
    if inspect.iscoroutine(found):
        found.close()  # a lambda around an async function: never awaited here
    return checked_principal(found)
