"""WSGI middlewares: the caller's context inward, the pipeline's errors outward.

The twins of `ResilienceContextMiddleware` and `ResilienceErrorMiddleware`
(ASGI), for Flask, Django and any WSGI server. The context a request gets is
set for the app's call and kept while the server reads the body it returns,
so the sync clients' calls made there (`create_client`, a factory's
``client``) see the caller's deadline, retry marker and correlation id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from http import HTTPStatus
from typing import TypeVar, cast

from http_resilience._core.correlation import inbound_correlation_id
from http_resilience._core.nested import (
    DownstreamRecord,
)
from http_resilience._middleware.asgi import problem_for
from http_resilience._middleware.inbound import (
    InboundContext,
    lowered,
    read_attempt,
)
from http_resilience._middleware.wsgi_types import (
    StartResponse,
    WatchedStart,
    WSGIApplication,
    WSGIEnvironment,
    check_app,
    enter_stack,
    environ_key,
    header_bytes,
    start_problem,
    status_code,
)
from http_resilience._primitives.wsgi_context import serve_in_context

__all__ = [
    "ResilienceContextMiddleware",
    "ResilienceErrorMiddleware",
    "TrustedCaller",
]

TrustedCaller = Callable[[WSGIEnvironment], bool]
"""Whether the caller's own headers are believed, told from its WSGI environ."""

_T = TypeVar("_T")


class ResilienceContextMiddleware(
    InboundContext[WSGIApplication, WSGIEnvironment, str]
):
    """Carries the caller's deadline, retry and correlation id into a WSGI app.

    The twin of `http_resilience.ResilienceContextMiddleware`, with the same
    options and rules: a trusted caller's ``X-Request-Timeout-Ms`` (less
    `safety_margin`, at most `default_deadline` or `max_deadline`) becomes a
    `deadline_scope`, its ``X-Retry-Attempt`` the marker the clients'
    `nested_retries` read, its correlation id the id every outbound call
    carries (a new one when it sent none it can take). They hold for the
    app's call and while the server reads the body it returns, in the thread
    that serves the request: the sync clients' calls made there are cut to
    the caller's deadline.

    When a call the app made gave up on its retries, a failed answer (400 or
    more) carries ``X-Retry-Exhausted: 1``; an exception the app's call
    raises after such a call is answered with the same header: a
    resilience or transport error with the status `ResilienceErrorMiddleware`
    gives it (not raised on: an outage, not a bug), anything else 503, and
    raised on after its body, for the server to log. An answer the app began
    with ``start_response`` is replaced through ``exc_info`` (the server
    re-raises the error if it already sent it).

    A header sent twice reaches the app joined with a comma (WSGI servers
    join repeated headers): such a deadline, attempt or id is ignored and
    counted (`ignored`), as a malformed one is.

    Args:
        app: The WSGI application to wrap.
        safety_margin: As for the ASGI middleware: default 0.05 seconds.
        max_deadline: As for the ASGI middleware: default 300 seconds.
        deadline_header: As for the ASGI middleware (None reads none).
        attempt_header: As for the ASGI middleware (None reads none).
        correlation_header: As for the ASGI middleware (None reads none).
        exhausted_header: As for the ASGI middleware (None writes none).
        trusted: Called once per request with its WSGI environ: True when the
            caller's deadline, attempt and correlation id are read, False when
            they are ignored (the request gets `default_deadline`, no retry
            marker and a new id). Check the peer (``REMOTE_ADDR``, what the
            mesh verified), never what a caller could claim unchecked. A
            plain function. None, the default, trusts every caller.
        default_deadline: As for the ASGI middleware: the deadline of a
            request that brings none (or whose caller is not trusted), and the
            longest any caller may give; None, the default, sets none.

    Attributes:
        ignored: How many values of each header were ignored as malformed.

    Raises:
        ValueError: As the ASGI middleware raises it.
        TypeError: `app` or `trusted` is not callable, `trusted` is
            ``async``, a header name is not a string (or None), a
            `default_deadline` of another type. At request time: `trusted`
            returned something other than True or False.

    Example:
        >>> import ipaddress
        >>> from wsgiref.util import setup_testing_defaults
        >>> from http_resilience import remaining_time
        >>> def app(environ, start_response):
        ...     start_response("200 OK", [])
        ...     return [f"{remaining_time():.0f}".encode()]
        >>> def from_the_mesh(environ):
        ...     return ipaddress.ip_address(environ["REMOTE_ADDR"]).is_private
        >>> wrapped = ResilienceContextMiddleware(
        ...     app, trusted=from_the_mesh, default_deadline="10s"
        ... )
        >>> environ = {"REMOTE_ADDR": "93.184.216.34"}
        >>> environ["HTTP_X_REQUEST_TIMEOUT_MS"] = "900"
        >>> setup_testing_defaults(environ)
        >>> body = wrapped(environ, lambda status, headers: None)
        >>> b"".join(body)  # not trusted: the default deadline, not the caller's
        b'10'
        >>> body.close()
    """

    _where = "the WSGI environ"

    def _check_app(self, app: WSGIApplication) -> None:
        check_app(app)

    def _key(self, header: object, name: str) -> str | None:
        """The environ key of `header`, once it is checked; None for None."""
        if lowered(header, name) is None:
            return None
        return environ_key(cast("str", header))

    def _mark(self, header: object, name: str) -> str | None:
        """`header` as given, once it is checked; None for None."""
        return None if lowered(header, name) is None else cast("str", header)

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app, and read its body, with the caller's context set."""
        enter_stack(environ, "ResilienceContextMiddleware")
        deadline = attempt = correlation = None
        if self._trusts(environ):
            deadline = self._read(environ, self._deadline, "deadline", self._seconds)
            attempt = self._read(environ, self._attempt, "attempt", read_attempt)
            correlation = self._read(
                environ,
                self._correlation,
                "correlation",
                lambda value: inbound_correlation_id([value]),
            )

        def start(stack: ExitStack) -> Iterable[bytes]:
            record = self._enter(stack, deadline, attempt, correlation)
            if record is None or self._exhausted is None:
                return self.app(environ, start_response)
            return self._answer(environ, start_response, record, self._exhausted)

        return serve_in_context(start)

    def _answer(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        record: DownstreamRecord,
        header: str,
    ) -> Iterable[bytes]:
        """Run the app; say on its failed answer that a dependency's retries ran out."""

        def marked(status: str) -> tuple[tuple[str, str], ...]:
            if record.exhausted and status_code(status) >= 400:
                return ((header, "1"),)
            return ()

        answer = WatchedStart(start_response, marked)
        try:
            return self.app(environ, cast("StartResponse", answer))
        except Exception as error:
            if not record.exhausted:
                raise
            replacing = answer.replacing()
            mark = ((header.encode("latin-1"), b"1"),)
            problem = problem_for(error)
            if problem is not None:  # an outage, as `ResilienceErrorMiddleware` says
                return [start_problem(start_response, *problem, replacing, mark)]
            # Anything else may be a bug: answered, and raised on to be logged.
            body = start_problem(
                start_response, HTTPStatus.SERVICE_UNAVAILABLE, None, replacing, mark
            )
            return _then_raise(body, error)

    def _read(
        self,
        environ: WSGIEnvironment,
        key: str | None,
        kind: str,
        read: Callable[[bytes], _T | None],
    ) -> _T | None:
        if key is None:
            return None
        found = environ.get(key)
        if found is None:
            return None
        value = header_bytes(found)
        return self._counted(kind, None if value is None else read(value))


class ResilienceErrorMiddleware:
    """Answers the pipeline's errors a WSGI app raises with problem+json.

    The twin of `http_resilience.ResilienceErrorMiddleware`: the same mapping
    (503 for a broken circuit, 504 for timeouts, 503 or 429 for a limiter or
    a quota, 502 for a transport error left after the retries, groups by the
    most conservative), the same bodies to the byte, ``Retry-After`` in
    whole seconds. The ``detail`` is fixed: never the exception's message.

    Only an error raised by the app's call is answered; one raised while the
    server reads the body is re-raised, as is every error that does not map.
    An answer the app began with ``start_response`` is replaced through
    ``exc_info`` (the server re-raises the error if it already sent it).
    Flask must run with ``PROPAGATE_EXCEPTIONS = True`` and Django with
    ``DEBUG_PROPAGATE_EXCEPTIONS = True`` for the error to reach it.

    Args:
        app: The WSGI application to wrap.

    Raises:
        TypeError: `app` is not callable.

    Example:
        >>> from wsgiref.util import setup_testing_defaults
        >>> from http_resilience import RateLimitedError
        >>> def app(environ, start_response):
        ...     raise RateLimitedError("client 'inventory' is full", retry_after=1.2)
        >>> environ = {}
        >>> setup_testing_defaults(environ)
        >>> answered = {}
        >>> def start_response(status, headers, exc_info=None):
        ...     answered.update(headers, status=status)
        >>> body = ResilienceErrorMiddleware(app)(environ, start_response)
        >>> answered["status"], answered["retry-after"]
        ('503 Service Unavailable', '2')
    """

    def __init__(self, app: WSGIApplication) -> None:
        check_app(app)
        self.app = app

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app; answer an error that maps, raised by its call."""
        enter_stack(environ, "ResilienceErrorMiddleware")
        watched = WatchedStart(start_response)
        try:
            return self.app(environ, cast("StartResponse", watched))
        except Exception as error:
            problem = problem_for(error)
            if problem is None:
                raise
            return [start_problem(start_response, *problem, watched.replacing())]


def _then_raise(body: bytes, error: Exception) -> Iterator[bytes]:
    """The answer's body, then `error`: the answer is sent, and the server logs it."""
    yield body
    raise error
