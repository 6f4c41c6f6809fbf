"""`DomainErrorMiddleware`: the mediator's domain errors as problem+json answers."""

from __future__ import annotations

from contextlib import nullcontext
from typing import ClassVar

from mediator._asgi.answers import (
    DEFAULT_RETRY_AFTER,
    DEGRADED_HEADER,
    DomainErrorAnswers,
    degraded_value,
)
from mediator._asgi.problem import send_problem
from mediator._asgi.stack import entered_http
from mediator._asgi.types import ASGIApp, Message, Receive, Scope, Send
from mediator._core.degradation import Degradation, collecting

__all__ = ["DEFAULT_RETRY_AFTER", "DEGRADED_HEADER", "DomainErrorMiddleware"]

_HEADER = DEGRADED_HEADER.lower().encode("ascii")


class DomainErrorMiddleware(DomainErrorAnswers[ASGIApp]):
    """Answers the domain errors the wrapped app raises with problem+json.

    The mapping (RFC 9457 ``application/problem+json`` bodies):

    - `ValidationError`: 422, with ``errors``, one ``{"field", "message"}``
      per `FieldError` (``field`` is the path joined with dots, such as
      ``"lines.0.sku"``, or null for the request as a whole);
    - `NotFoundError`: 404;
    - `ForbiddenError`: 403, or 401 when the request has no principal at all
      (``WWW-Authenticate`` is then `www_authenticate`, when given);
    - `ConflictError`: 409;
    - `BusinessRuleError`: 422;
    - `TransientDatabaseError` (left after the retries): 503, with
      ``Retry-After`` (`retry_after`, in whole seconds rounded up);
    - `DeadlineExceededError` (the caller's deadline passed while the unit of
      work waited for a lock): 504, without ``Retry-After``.

    The body holds ``type`` (``"about:blank"``), ``title``, ``status`` and a
    ``detail`` fixed for each kind: never the exception's message, nor its
    cause, which may name tables, ids or values the caller sent. Only the
    field errors' messages are shown as written, for the caller to fix the
    request: pydantic's name the form expected, not the value sent; the
    messages of your own `Validator` should not quote the input either.

    The principal is the one `current_principal` sees where the error is
    caught, or the one a `RequestContextMiddleware` inside this one (a
    mounted app's) left in the scope. A principal set by other means (your
    own ``acting_as``) must be set outside this middleware. Put it inside
    `RequestContextMiddleware` and `IdempotencyKeyMiddleware`: another order
    raises `MiddlewareOrderError` on every request.

    An `ExceptionGroup` (`Mediator.publish` raises one when handlers fail),
    nested groups included, is answered when every error in it maps: with
    the first of 401, 403, 404, 409, 422 (field errors first, then business
    rules), 503 and 504 its members reach. A deterministic failure wins over the
    transient one: a retry would fail the same way. A 422 lists the field
    errors of every `ValidationError` in the group. A group holding any other
    error is re-raised whole: the server answers 500, as for that error alone.

    With ``degradation_header=True``, an answer the app gives after a
    ``@fallback`` query degraded while it was handling the request (in any
    task or thread it started, nested sends too) carries a ``Degraded``
    header: a structured-field list (RFC 9651) of the sources, each with its
    ``age`` in whole seconds when the fallback gave its ``as_of``, such as
    ``Degraded: "stock-cache";age=42``. Nothing else is sent: not the
    failure, not the query. A problem answer this middleware writes carries
    none.

    An error raised after the app started its response cannot change it, and
    is re-raised; so is every exception that does not map (a `DomainError` of
    your own that is none of the five included). Scopes other than ``http``
    pass through untouched.

    Args:
        app: The ASGI application to wrap.
        retry_after: Seconds a 503 asks the caller to wait; default 1. Sent
            in whole seconds, rounded up.
        www_authenticate: The challenge of a 401 answer's
            ``WWW-Authenticate`` header, such as ``'Bearer realm="shop"'``;
            None (the default) sends none.
        degradation_header: Whether a degraded answer says so in a
            ``Degraded`` header (above); default False.

    Raises:
        TypeError: `app` is not callable, `retry_after` is not a number,
            `www_authenticate` is not a string, or `degradation_header` not a
            bool.
        ValueError: `retry_after` is negative, NaN, infinite or over a day,
            or `www_authenticate` is empty or holds a character a header
            value may not (a line break).

    Example:
        >>> import asyncio, httpx
        >>> from mediator import NotFoundError
        >>> async def app(scope, receive, send):
        ...     raise NotFoundError("no order 42 for customer secret@example.com")
        >>> async def main():
        ...     wrapped = httpx.ASGITransport(app=DomainErrorMiddleware(app))
        ...     async with httpx.AsyncClient(transport=wrapped) as client:
        ...         response = await client.get("http://shop/orders/42")
        ...     return response.status_code, response.json()["detail"]
        >>> asyncio.run(main())
        (404, 'Something this request names does not exist.')
    """

    _application: ClassVar[str] = "an ASGI application"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer a domain error it raised before it responded."""
        if not await entered_http(
            self.app, scope, receive, send, "DomainErrorMiddleware"
        ):
            return
        started = False
        found: list[Degradation] | None = None

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                value = None if found is None else degraded_value(found)
                if value is not None:
                    headers = [*message.get("headers", ()), (_HEADER, value.encode())]
                    message = {**message, "headers": headers}
            await send(message)

        gathering = collecting() if self.degradation_header else nullcontext(None)
        try:
            with gathering as found:
                await self.app(scope, receive, watched_send)
        except Exception as error:
            if started:
                raise
            problem = self._problem(error, scope)
            if problem is None:
                raise
            await send_problem(send, problem)
