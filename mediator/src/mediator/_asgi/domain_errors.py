"""`DomainErrorMiddleware`: the mediator's domain errors as problem+json answers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, cast

from mediator._asgi.stack import enter_stack
from mediator._asgi.types import (
    PRINCIPAL_SCOPE_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    check_app,
    check_challenge,
    send_problem,
)
from mediator._context import current_principal
from mediator._errors import (
    BusinessRuleError,
    ConflictError,
    FieldError,
    ForbiddenError,
    NotFoundError,
    TransientDatabaseError,
    ValidationError,
)

__all__ = ["DEFAULT_RETRY_AFTER", "DomainErrorMiddleware"]

DEFAULT_RETRY_AFTER: Final = 1.0
"""Seconds a 503 answer asks the caller to wait: a transaction the database
refused for now (a lock, a serialization failure) usually goes through on the
next try."""

_MAX_RETRY_AFTER: Final = 86_400.0
# Visible ASCII and spaces: what a header value may hold without escaping.


@dataclass(frozen=True, slots=True)
class _Answer:
    """One kind of answer: its status and its fixed wording."""

    status: int
    title: str
    detail: str


_UNAUTHENTICATED: Final = _Answer(
    401, "Unauthorized", "This request needs an authenticated caller."
)
_FORBIDDEN: Final = _Answer(
    403, "Forbidden", "The caller is not allowed to make this request."
)
_NOT_FOUND: Final = _Answer(
    404, "Not Found", "Something this request names does not exist."
)
_CONFLICT: Final = _Answer(
    409, "Conflict", "This request conflicts with the current state of the data."
)
_INVALID: Final = _Answer(
    422, "Unprocessable Content", "The request has invalid fields: see errors."
)
_RULE: Final = _Answer(
    422, "Unprocessable Content", "The request breaks a business rule."
)
_UNAVAILABLE: Final = _Answer(
    503, "Service Unavailable", "The service is busy. Try again later."
)

_PRECEDENCE: Final = (
    _UNAUTHENTICATED,
    _FORBIDDEN,
    _NOT_FOUND,
    _CONFLICT,
    _INVALID,
    _RULE,
    _UNAVAILABLE,
)
"""A group of errors is answered with the first kind its members reach.

Deterministic failures come before the transient one: a member that fails
the same way every time fails a retry too, so the caller must not be invited
to retry with a 503. Among them, what the caller must fix first comes first
(who it is, what it may do, what exists, then the request itself)."""

_PLAIN: Final[tuple[tuple[type[Exception], _Answer], ...]] = (
    (NotFoundError, _NOT_FOUND),
    (ConflictError, _CONFLICT),
    (BusinessRuleError, _RULE),
    (TransientDatabaseError, _UNAVAILABLE),
)
"""The errors whose answer depends on nothing else."""


class DomainErrorMiddleware:
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
      ``Retry-After`` (`retry_after`, in whole seconds rounded up).

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
    rules) and 503 its members reach. A deterministic failure wins over the
    transient one: a retry would fail the same way. A 422 lists the field
    errors of every `ValidationError` in the group. A group holding any other
    error is re-raised whole: the server answers 500, as for that error alone.

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

    Raises:
        TypeError: `app` is not callable, `retry_after` is not a number, or
            `www_authenticate` is not a string.
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

    def __init__(
        self,
        app: ASGIApp,
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        www_authenticate: str | None = None,
    ) -> None:
        check_app(app)
        self.app = app
        self.retry_after = _checked_retry_after(retry_after)
        self.www_authenticate = check_challenge(www_authenticate)
        self._retry_after = str(math.ceil(retry_after)).encode("ascii")
        self._challenge = (
            None if www_authenticate is None else www_authenticate.encode("ascii")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer a domain error it raised before it responded."""
        enter_stack(scope, "DomainErrorMiddleware")
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as error:
            if started:
                raise
            authenticated = (
                current_principal() is not None
                or scope.get(PRINCIPAL_SCOPE_KEY) is not None
            )
            found = _answer_for(error, authenticated)
            if found is None:
                raise
            await self._send(send, *found)

    async def _send(
        self, send: Send, answer: _Answer, errors: tuple[FieldError, ...]
    ) -> None:
        members: dict[str, object] | None = None
        if answer is _INVALID:
            members = {
                "errors": [
                    {
                        "field": ".".join(map(str, error.path)) if error.path else None,
                        "message": error.message,
                    }
                    for error in errors
                ]
            }
        headers: list[tuple[bytes, bytes]] = []
        if answer is _UNAVAILABLE:
            headers.append((b"retry-after", self._retry_after))
        elif answer is _UNAUTHENTICATED and self._challenge is not None:
            headers.append((b"www-authenticate", self._challenge))
        await send_problem(
            send,
            answer.status,
            answer.title,
            answer.detail,
            members=members,
            headers=headers,
        )


def _answer_for(
    error: BaseException, authenticated: bool
) -> tuple[_Answer, tuple[FieldError, ...]] | None:
    """The answer to `error` and its field errors; None when it does not map."""
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        found = [_answer_for(member, authenticated) for member in group.exceptions]
        known = [answer for answer in found if answer is not None]
        if len(known) < len(found):
            return None
        chosen = min((answer for answer, _ in known), key=_PRECEDENCE.index)
        return chosen, tuple(field for _, fields in known for field in fields)
    if isinstance(error, ValidationError):
        return _INVALID, error.errors
    if isinstance(error, ForbiddenError):
        return (_FORBIDDEN if authenticated else _UNAUTHENTICATED), ()
    for kind, answer in _PLAIN:
        if isinstance(error, kind):
            return answer, ()
    return None


def _checked_retry_after(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"retry_after must be a number of seconds, got {type(value).__name__}"
        )
    if not (math.isfinite(value) and 0 <= value <= _MAX_RETRY_AFTER):
        raise ValueError(
            f"retry_after must be 0 to {_MAX_RETRY_AFTER:.0f} seconds, got {value!r}"
        )
    return value
