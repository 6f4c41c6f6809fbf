"""WSGI middlewares: the caller's context inward, the pipeline's errors outward.

The twins of `ResilienceContextMiddleware` and `ResilienceErrorMiddleware`
(ASGI), for Flask, Django and any WSGI server. The context a request gets is
set for the app's call and kept while the server reads the body it returns,
so the sync clients' calls made there (`create_client`, a factory's
``client``) see the caller's deadline, retry marker and correlation id.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from http import HTTPStatus
from typing import Any, TypeVar, cast

from http_resilience._core.correlation import (
    correlation_id,
    inbound_correlation_id,
    new_correlation_id,
)
from http_resilience._core.deadline import DEADLINE_HEADER, deadline_scope
from http_resilience._core.nested import (
    RETRY_ATTEMPT_HEADER,
    RETRY_EXHAUSTED_HEADER,
    DownstreamRecord,
    caller_attempt_scope,
    downstream_scope,
)
from http_resilience._primitives.durations import DurationInput
from http_resilience._primitives.wsgi_context import serve_in_context
from http_resilience._transports.asgi import problem_for
from http_resilience._transports.correlation import DEFAULT_CORRELATION_HEADER
from http_resilience._transports.wsgi_inbound import (
    checked_limits,
    checked_trusted,
    lowered,
    read_attempt,
    read_deadline,
    trusts,
)
from http_resilience._transports.wsgi_inbound import (
    default_deadline as default_deadline_of,
)
from http_resilience._transports.wsgi_types import (
    StartResponse,
    WSGIApplication,
    WSGIEnvironment,
    check_app,
    enter_stack,
    environ_key,
    header_bytes,
    problem_response,
    status_code,
)

__all__ = [
    "ResilienceContextMiddleware",
    "ResilienceErrorMiddleware",
    "TrustedCaller",
]

TrustedCaller = Callable[[WSGIEnvironment], bool]
"""Whether the caller's own headers are believed, told from its WSGI environ."""

Write = Callable[[bytes], object]
_T = TypeVar("_T")


class ResilienceContextMiddleware:
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
        safety_margin: Seconds taken off the caller's deadline, for the answer
            to travel back. Default 0.05.
        max_deadline: The longest deadline a caller may give, in seconds; a
            larger one is clamped to it (to `default_deadline`, when that is
            set). Default 300.
        deadline_header: The header of the caller's time left, in integer
            milliseconds; None reads none. Default ``X-Request-Timeout-Ms``.
        attempt_header: The header of the caller's attempt number; None reads
            none. Default ``X-Retry-Attempt``.
        correlation_header: The header of the caller's correlation id; None
            reads none. Default ``X-Correlation-ID``.
        exhausted_header: The header written on a failed answer after a
            call of the app gave up on its retries; None writes none (and
            leaves escaping exceptions alone). Default ``X-Retry-Exhausted``.
        trusted: Called once per request with its WSGI environ: True when the
            caller's deadline, attempt and correlation id are read, False when
            they are ignored (the request gets `default_deadline`, no retry
            marker and a new id). Check the peer (``REMOTE_ADDR``, what the
            mesh verified), never what a caller could claim unchecked. A
            plain function. None, the default, trusts every caller.
        default_deadline: The deadline of a request that brings none (or
            whose caller is not trusted), and the longest any caller may give.
            A `timedelta`, seconds, or a string such as ``"5s"``; positive, at
            most `max_deadline`. None, the default: a request without a
            deadline has none.

    Attributes:
        ignored: How many values of each header were ignored as malformed.

    Raises:
        ValueError: A margin or limit that is negative, NaN or infinite, a
            `default_deadline` that is no positive duration or is longer than
            `max_deadline`, or a header name that is not one.
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

    def __init__(
        self,
        app: WSGIApplication,
        *,
        safety_margin: float = 0.05,
        max_deadline: float = 300.0,
        deadline_header: str | None = DEADLINE_HEADER,
        attempt_header: str | None = RETRY_ATTEMPT_HEADER,
        correlation_header: str | None = DEFAULT_CORRELATION_HEADER,
        exhausted_header: str | None = RETRY_EXHAUSTED_HEADER,
        trusted: TrustedCaller | None = None,
        default_deadline: DurationInput | None = None,
    ) -> None:
        check_app(app)
        checked_limits(safety_margin, max_deadline)
        self.app = app
        self.safety_margin = safety_margin
        self.max_deadline = max_deadline
        self.trusted: TrustedCaller | None = checked_trusted(
            trusted, "the WSGI environ"
        )
        self.default_deadline = default_deadline_of(default_deadline, max_deadline)
        self._default = (
            None
            if self.default_deadline is None
            else self.default_deadline.total_seconds()
        )
        self._longest = max_deadline if self._default is None else self._default
        self._deadline = _key(deadline_header, "deadline_header")
        self._attempt = _key(attempt_header, "attempt_header")
        self._correlation = _key(correlation_header, "correlation_header")
        self._exhausted = (
            None
            if lowered(exhausted_header, "exhausted_header") is None
            else exhausted_header
        )
        self.ignored: Counter[str] = Counter()

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app, and read its body, with the caller's context set."""
        enter_stack(environ, "ResilienceContextMiddleware")
        deadline = attempt = correlation = None
        if trusts(self.trusted, environ):
            deadline = self._read(environ, self._deadline, "deadline", self._seconds)
            attempt = self._read(environ, self._attempt, "attempt", read_attempt)
            correlation = self._read(
                environ,
                self._correlation,
                "correlation",
                lambda value: inbound_correlation_id([value]),
            )
        if deadline is None:
            deadline = self._default
        if correlation is None and self._correlation is not None:
            # One id for every call the request makes, as if the caller sent it.
            correlation = new_correlation_id()

        def start(stack: ExitStack) -> Iterable[bytes]:
            if deadline is not None:
                stack.enter_context(deadline_scope(deadline))
            if attempt is not None:
                stack.enter_context(caller_attempt_scope(attempt))
            if correlation is not None:
                stack.enter_context(correlation_id(correlation))
            if self._exhausted is None:
                return self.app(environ, start_response)
            record = stack.enter_context(downstream_scope())
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
        started = False

        def answer(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Write:
            nonlocal started
            started = True
            if record.exhausted and status_code(status) >= 400:
                headers = [*headers, (header, "1")]
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, cast("StartResponse", answer))
        except Exception as error:
            if not record.exhausted:
                raise
            replacing = sys.exc_info() if started else None
            mark = ((header.encode("latin-1"), b"1"),)
            problem = problem_for(error)
            if problem is not None:  # an outage, as `ResilienceErrorMiddleware` says
                status, headers, body = problem_response(*problem, mark)
                start_response(status, headers, replacing)
                return [body]
            # Anything else may be a bug: answered, and raised on to be logged.
            status, headers, body = problem_response(
                HTTPStatus.SERVICE_UNAVAILABLE, None, mark
            )
            start_response(status, headers, replacing)
            return _then_raise(body, error)

    def _seconds(self, value: bytes) -> float | None:
        return read_deadline(value, self.safety_margin, self._longest)

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
        taken = None if value is None else read(value)
        if taken is None:
            self.ignored[kind] += 1
        return taken


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
        started = False

        def watched(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Write:
            nonlocal started
            started = True
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, cast("StartResponse", watched))
        except Exception as error:
            problem = problem_for(error)
            if problem is None:
                raise
            status, headers, body = problem_response(*problem)
            start_response(status, headers, sys.exc_info() if started else None)
            return [body]


def _then_raise(body: bytes, error: Exception) -> Iterator[bytes]:
    """The answer's body, then `error`: the answer is sent, and the server logs it."""
    yield body
    raise error


def _key(header: str | None, name: str) -> str | None:
    """The environ key of `header`, once it is checked; None for None."""
    return None if lowered(header, name) is None else environ_key(cast("str", header))
