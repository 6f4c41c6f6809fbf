"""The problem+json answer to each domain error, whatever the server.

`mediator.asgi.DomainErrorMiddleware` and `mediator.wsgi`'s twin answer the
same errors the same way: `answer_for` decides the kind of answer (group
precedence included), `problem_parts` the members and headers it carries,
and `DomainErrorAnswers`, the base of both, holds their options; each
middleware only writes the answer in its own interface.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

from mediator._asgi.problem import Problem, check_app, check_challenge
from mediator._asgi.types import PRINCIPAL_SCOPE_KEY
from mediator._core.context import current_principal
from mediator._core.degradation import Degradation
from mediator._core.errors import (
    BusinessRuleError,
    ConflictError,
    DeadlineExceededError,
    FieldError,
    ForbiddenError,
    NotFoundError,
    TransientDatabaseError,
    ValidationError,
)

App = TypeVar("App")

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "DEGRADED_HEADER",
    "INTERNAL_ERROR",
    "DomainErrorAnswers",
    "answer_for",
    "checked_retry_after",
    "degraded_value",
    "log_unhandled",
    "problem_parts",
]

DEFAULT_RETRY_AFTER: Final = 1.0
"""Seconds a 503 answer asks the caller to wait: a transaction the database
refused for now (a lock, a serialization failure) usually goes through on the
next try."""

_MAX_RETRY_AFTER: Final = 86_400.0

DEGRADED_HEADER: Final = "Degraded"
"""The response header that names the degraded sources of an answer.

A structured-field list (RFC 9651): one string per source, with an ``age``
parameter in whole seconds when the fallback gave its ``as_of``, such as
``Degraded: "stock-cache";age=42, "price-list"``."""


_UNAUTHENTICATED: Final = Problem(401, "This request needs an authenticated caller.")
_FORBIDDEN: Final = Problem(403, "The caller is not allowed to make this request.")
_NOT_FOUND: Final = Problem(404, "Something this request names does not exist.")
_CONFLICT: Final = Problem(
    409, "This request conflicts with the current state of the data."
)
_INVALID: Final = Problem(422, "The request has invalid fields: see errors.")
_RULE: Final = Problem(422, "The request breaks a business rule.")
_UNAVAILABLE: Final = Problem(503, "The service is busy. Try again later.")
_DEADLINE: Final = Problem(504, "The request ran out of time before it could finish.")

INTERNAL_ERROR: Final = Problem(500, "The service failed to answer this request.")
"""The answer to an error nothing inside answered: a bug, never described."""

_PRECEDENCE: Final = (
    _UNAUTHENTICATED,
    _FORBIDDEN,
    _NOT_FOUND,
    _CONFLICT,
    _INVALID,
    _RULE,
    _UNAVAILABLE,
    _DEADLINE,
)
"""A group of errors is answered with the first kind its members reach.

Deterministic failures come before the transient one: a member that fails
the same way every time fails a retry too, so the caller must not be invited
to retry with a 503. Among them, what the caller must fix first comes first
(who it is, what it may do, what exists, then the request itself)."""

_PLAIN: Final[tuple[tuple[type[Exception], Problem], ...]] = (
    (NotFoundError, _NOT_FOUND),
    (ConflictError, _CONFLICT),
    (BusinessRuleError, _RULE),
    (TransientDatabaseError, _UNAVAILABLE),
    (DeadlineExceededError, _DEADLINE),
)
"""The errors whose answer depends on nothing else."""


def answer_for(
    error: BaseException, authenticated: bool
) -> tuple[Problem, tuple[FieldError, ...]] | None:
    """The answer to `error` and its field errors; None when it does not map.

    `authenticated` tells a `ForbiddenError`'s 403 from 401.
    """
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        found = [answer_for(member, authenticated) for member in group.exceptions]
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


def problem_parts(
    answer: Problem,
    errors: tuple[FieldError, ...],
    *,
    retry_after: bytes,
    challenge: bytes | None,
) -> Problem:
    """`answer` with the members its body adds and its extra headers.

    `retry_after` is the ``Retry-After`` value of a 503; `challenge` the
    ``WWW-Authenticate`` of a 401, when there is one.
    """
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
        headers.append((b"retry-after", retry_after))
    elif answer is _UNAUTHENTICATED and challenge is not None:
        headers.append((b"www-authenticate", challenge))
    return replace(answer, members=members, headers=headers)


def degraded_value(found: list[Degradation]) -> str | None:
    """The `DEGRADED_HEADER` value for `found`; None when nothing degraded.

    One member per source, in the order they degraded; a source that degraded
    twice shows its oldest data. Only the source and the age are sent: never
    the failure, nor ``as_of`` (the age says as much, without the server's
    clock).

    Example:
        >>> from datetime import timedelta
        >>> degraded_value([
        ...     Degradation("stock-cache", None, timedelta(seconds=42.7), "OSError"),
        ...     Degradation("price-list", None, None, "TimeoutError"),
        ... ])
        '"stock-cache";age=42, "price-list"'
    """
    ages: dict[str, int | None] = {}
    for degradation in found:
        age = None if degradation.age is None else int(degradation.age.total_seconds())
        known = ages.get(degradation.source)
        ages[degradation.source] = age if known is None else max(known, age or 0)
    if not ages:
        return None
    # A source is letters, digits and . _ : / - (`degraded` checks it): it
    # needs no escaping inside the quotes.
    return ", ".join(
        f'"{source}"' if age is None else f'"{source}";age={age}'
        for source, age in ages.items()
    )


class DomainErrorAnswers(Generic[App]):
    """The options of both `DomainErrorMiddleware`s, checked, and their answers.

    A subclass names the `app` it wraps (`_application`) and writes the
    `Problem` that `_problem` returns in its own interface.
    """

    _application: ClassVar[str]

    def __init__(
        self,
        app: App,
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        www_authenticate: str | None = None,
        degradation_header: bool = False,
    ) -> None:
        check_app(app, self._application)
        if not isinstance(cast("object", degradation_header), bool):
            raise TypeError(
                "degradation_header must be True or False, got "
                f"{type(degradation_header).__name__}"
            )
        self.degradation_header = degradation_header
        self.app = app
        self.retry_after = checked_retry_after(retry_after)
        self.www_authenticate = check_challenge(www_authenticate)
        self._retry_after = str(math.ceil(retry_after)).encode("ascii")
        self._challenge = (
            None if www_authenticate is None else www_authenticate.encode("ascii")
        )

    def _problem(self, error: Exception, request: Mapping[str, Any]) -> Problem | None:
        """The answer to `error`, raised for `request`; None when it does not map.

        `request` is the ASGI scope or WSGI environ: a principal a context
        middleware inside this one left there counts as authenticated.
        """
        authenticated = (
            current_principal() is not None
            or request.get(PRINCIPAL_SCOPE_KEY) is not None
        )
        found = answer_for(error, authenticated)
        if found is None:
            return None
        answer, errors = found
        return problem_parts(
            answer, errors, retry_after=self._retry_after, challenge=self._challenge
        )


def checked_retry_after(value: object) -> float:
    """`value` as the seconds a 503 asks to wait.

    Raises:
        TypeError: It is not a number.
        ValueError: It is negative, NaN, infinite or over a day.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"retry_after must be a number of seconds, got {type(value).__name__}"
        )
    if not (math.isfinite(value) and 0 <= value <= _MAX_RETRY_AFTER):
        raise ValueError(
            f"retry_after must be 0 to {_MAX_RETRY_AFTER:.0f} seconds, got {value!r}"
        )
    return value


def log_unhandled(
    logger: logging.Logger,
    error: Exception,
    method: object,
    path: object,
    correlation: str,
) -> None:
    """Log the error a 500 answered, once: its traceback, the request and its id."""
    logger.error(
        "unhandled error in %s %s (correlation id %s), answered 500",
        method,
        path,
        correlation,
        exc_info=error,
    )
