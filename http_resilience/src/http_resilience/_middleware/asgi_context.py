"""An ASGI middleware that carries a caller's deadline, retry and correlation id inward.

For each inbound HTTP request it reads three headers and sets, for everything
the request's handler does (in its task, and the tasks and threads it starts
with the context copied, as ASGI frameworks do):

- ``X-Request-Timeout-Ms``: the caller's deadline, less a safety margin and at
  most `max_deadline`, as a `deadline_scope`: every resilient call the handler
  makes is cut to it, and so is the mediator retry given `remaining_time`;
- ``X-Retry-Attempt``: the caller is retrying (2 or more), so the handler's
  own resilient calls follow their `nested_retries` (by default, one attempt
  each);
- the correlation header: the id every outbound call of the handler carries;
  a new one for the request when the caller sent none it can take.

Only a trusted caller's values are read (`trusted`, by default every caller):
another's deadline, attempt and id are ignored, as Envoy strips its own
``x-envoy-*`` headers from a request that comes from outside. The deadline of
a request is then `default_deadline`, as it is for a trusted caller that sends
none; and no caller's deadline is longer than it, since a caller may only
shorten the time a request gets (gRPC's rule for deadlines), never lengthen
it.

On the way out, when a resilient call the handler made gave up on a failure
after retrying it as far as its policy goes, a failed answer (status 400 or
more) says so in ``X-Retry-Exhausted: 1``: the caller does not retry it, and
each failure is retried at one hop only. An exception that escapes the
handler after such a call, before any answer began, is answered with the same
header: a resilience or transport error, or the `httpx.HTTPStatusError` that
``raise_for_status()`` raises on an answer the client gave up on, with the
status `ResilienceErrorMiddleware` gives it (and not raised on: it is an
outage, not a bug, so the server logs no traceback and keeps the connection);
anything else 503 and raised on, for the server to log.

A value that is malformed or out of range is ignored and counted
(`ResilienceContextMiddleware.ignored`), never raised: a bad header from a
caller must not fail its request.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from http import HTTPStatus

from http_resilience._core.correlation import inbound_correlation_id
from http_resilience._core.nested import (
    DownstreamRecord,
)
from http_resilience._middleware.asgi import problem_for, send_problem
from http_resilience._middleware.inbound import (
    InboundContext,
    lowered,
    read_attempt,
)
from http_resilience._middleware.stack import entered
from http_resilience._middleware.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ResilienceContextMiddleware", "TrustedCaller"]

TrustedCaller = Callable[[Scope], bool]
"""Whether the caller's own headers are believed, told from its ASGI scope."""


class ResilienceContextMiddleware(InboundContext[ASGIApp, Scope, bytes]):
    """Carries the caller's deadline, retry and correlation id into the handler.

    Args:
        app: The ASGI application to wrap.
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
            call of the handler gave up on its retries; None writes none (and
            leaves escaping exceptions alone). Default ``X-Retry-Exhausted``.
        trusted: Called once per request with its ASGI scope: True when the
            caller's deadline, attempt and correlation id are read, False when
            they are ignored (the request gets `default_deadline`, no retry
            marker and a new id). For a service the internet reaches: check
            the peer (a mesh identity, a private address, a verified client
            certificate), never what a caller could claim unchecked. A plain
            function, not ``async def``: it decides from the scope alone.
            None, the default, trusts every caller.
        default_deadline: The deadline of a request that brings none (or
            whose caller is not trusted), and the longest any caller may give:
            a longer one is cut to it. A `timedelta`, seconds, or a string
            such as ``"5s"``; positive, at most `max_deadline`. None, the
            default: a request without a deadline has none.

    Attributes:
        ignored: How many values of each header were ignored as malformed.

    Raises:
        ValueError: A margin or limit that is negative, NaN or infinite, a
            `default_deadline` that is no positive duration or is longer than
            `max_deadline`, or a header name that is not one.
        TypeError: A header name that is not a string (or None), a `trusted`
            that is not callable or is ``async``, a `default_deadline` of
            another type. At request time: `trusted` returned something other
            than True or False.

    Example:
        >>> import ipaddress
        >>> async def app(scope, receive, send): ...
        >>> def from_the_mesh(scope):
        ...     peer = scope.get("client")
        ...     return peer is not None and ipaddress.ip_address(peer[0]).is_private
        >>> wrapped = ResilienceContextMiddleware(
        ...     app, trusted=from_the_mesh, default_deadline="10s"
        ... )
        >>> wrapped.default_deadline
        datetime.timedelta(seconds=10)
    """

    _where = "the ASGI scope"

    def _key(self, header: object, name: str) -> bytes | None:
        """The header to read, lower case, as ASGI gives header names."""
        found = lowered(header, name)
        return None if found is None else found.encode("ascii")

    _mark = _key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with the caller's context set; pass anything else through."""
        if not await entered(scope, receive, send, "ResilienceContextMiddleware"):
            return
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        deadline = attempt = correlation = None
        if self._trusts(scope):
            ids: list[bytes] = []
            for name, value in scope.get("headers", ()):
                lowered = bytes(name).lower()
                if lowered == self._deadline:
                    deadline = self._counted("deadline", self._seconds(bytes(value)))
                elif lowered == self._attempt:
                    attempt = self._counted("attempt", read_attempt(bytes(value)))
                elif lowered == self._correlation:
                    ids.append(bytes(value))
            if ids:
                correlation = self._counted("correlation", inbound_correlation_id(ids))
        with ExitStack() as stack:
            record = self._enter(stack, deadline, attempt, correlation)
            if record is None or self._exhausted is None:
                await self.app(scope, receive, send)
            else:
                await self._answer(scope, receive, send, record, self._exhausted)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        record: DownstreamRecord,
        header: bytes,
    ) -> None:
        """Run the app; say on its failed answer that a dependency's retries ran out."""
        started = False

        async def answer(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                if record.exhausted and message["status"] >= 400:
                    headers = [*message.get("headers", ()), (header, b"1")]
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, answer)
        except Exception as error:
            if started or not record.exhausted:
                raise
            problem = problem_for(error)
            if problem is not None:
                # An outage, as `ResilienceErrorMiddleware` says (a marked
                # HTTPStatusError among them): answered, never raised on, so
                # the server keeps the connection and logs no traceback.
                await send_problem(send, *problem, ((header, b"1"),))
                return
            # Anything else may be a bug: answered, and raised on to be logged.
            await send_problem(
                send, HTTPStatus.SERVICE_UNAVAILABLE, None, ((header, b"1"),)
            )
            raise
