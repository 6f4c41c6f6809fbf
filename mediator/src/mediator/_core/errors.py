"""The mediator's exceptions: domain errors (final) and configuration errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "BusinessRuleError",
    "ConfigurationError",
    "ConflictError",
    "DeadlineExceededError",
    "DomainError",
    "DuplicateHandlerError",
    "FieldError",
    "ForbiddenError",
    "HandlerNotFoundError",
    "IdempotencyKeyMismatchError",
    "MediatorError",
    "NotFoundError",
    "ScopeError",
    "SyncPathError",
    "TransientDatabaseError",
    "UnresolvableDependencyError",
    "ValidationError",
]


class MediatorError(Exception):
    """Root of every exception the `mediator` package raises."""


# --- Domain errors: deterministic, a second attempt fails identically ----------


class DomainError(MediatorError):
    """A deterministic failure of the request itself; retrying cannot help."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One failed field: where (`path`, as in pydantic's `loc`) and why."""

    path: tuple[str | int, ...]
    message: str


class ValidationError(DomainError):
    """The request is invalid; `errors` lists every failed field.

    Args:
        message: A summary for people.
        errors: The field failures, each with its path and message.
    """

    def __init__(self, message: str, errors: Sequence[FieldError] = ()) -> None:
        super().__init__(message)
        self.errors: tuple[FieldError, ...] = tuple(errors)


class BusinessRuleError(DomainError):
    """A business rule refused the request (for example, insufficient stock)."""


class IdempotencyKeyMismatchError(BusinessRuleError):
    """An idempotency key was reused with another request (another fingerprint).

    A client reuses a key only to retry the same request; a new request takes a
    new key. Mapped to 422, like any business rule.
    """


class NotFoundError(DomainError):
    """Something the request names does not exist."""


class ForbiddenError(DomainError):
    """The principal may not perform the request, or there is no principal."""


class ConflictError(DomainError):
    """The request conflicts with the current state (for example, a duplicate key)."""


# --- Transient failures: worth another attempt --------------------------------


class TransientDatabaseError(MediatorError):
    """The database refused the transaction for now, not for good.

    Raised at the transaction boundary for a serialization failure or a
    deadlock (PostgreSQL SQLSTATE 40001, 40P01), for SQLite's "database is
    locked", for a dropped connection, and when a nested attempt's savepoint
    cannot be rolled back to. The original exception is its ``__cause__``. It
    is not a `DomainError`, so retry treats it as transient: a second attempt,
    in a fresh transaction, can succeed. The transaction it happened in is
    lost, so a send nested in a unit of work does not retry it: the outermost
    `@retryable` send does.
    """


class DeadlineExceededError(MediatorError, TimeoutError):
    """The caller's deadline passed while waiting (for a database lock, say).

    Raised by the unit of work when the time its ``remaining_time`` answers
    ran out before, or while, its transaction waited for a lock: SQLite's
    write lock, a PostgreSQL row or table lock. A `TimeoutError`, not a
    `DomainError`; still final for retry, which reads its
    ``resilience_final`` mark: no attempt may start past the deadline. The
    ASGI `DomainErrorMiddleware` answers it with 504.
    """

    resilience_final: ClassVar[bool] = True


# --- Configuration errors: a mistake in how the mediator was set up ------------


class ConfigurationError(MediatorError):
    """The mediator is set up wrongly; the message says what to change."""


class HandlerNotFoundError(ConfigurationError, LookupError):
    """No handler is registered for the type of the request sent."""


class DuplicateHandlerError(ConfigurationError):
    """Two handlers are registered for one request type."""


class UnresolvableDependencyError(ConfigurationError):
    """A handler or behavior has a constructor dependency the injector cannot build."""


class SyncPathError(ConfigurationError):
    """`send_sync` or `publish_sync` reached a component that only runs async."""


class ScopeError(ConfigurationError):
    """A request-scoped service was asked for outside any send."""
