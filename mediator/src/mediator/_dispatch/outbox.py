"""`Outbox`: messages recorded in a handler's transaction, sent after it commits.

A ``@transactional`` handler takes an `Outbox` (``@inject``) and adds commands
and notifications to it. They are rows of the handler's own transaction: they
commit with its writes or roll back with them, and nothing is sent before the
commit. A relay (`mediator.sqlalchemy.OutboxRelay`) sends each one through the
mediator later, at least once, under its message id as the idempotency key, so
an ``@idempotent`` receiver applies it once.

This module is the part of the outbox that needs no database: what a message
is when stored (`OutboxEntry`), how it is made from a message and rebuilt from
a record, and how a relay sends it. A record never makes the process import
code: its type is looked up among the modules already loaded, and must be a
`Command` or a `Notification` class.
"""

from __future__ import annotations

import json
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterable, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic import ValidationError as PayloadError

from mediator._behaviors.idempotency.marker import minted_idempotency_key
from mediator._core.clock import utc_now
from mediator._core.context import (
    Principal,
    acting_as,
    correlation_id,
    current_correlation_id,
    current_principal,
)
from mediator._core.errors import ConfigurationError, ConflictError, DomainError
from mediator._core.fields import sensitive_fields
from mediator._core.requests import Command, Notification, Query, StreamQuery

if TYPE_CHECKING:  # the mediator's module imports this one's importers
    from mediator._dispatch.mediator import Mediator

__all__ = [
    "MAX_ORDERING_KEY_LENGTH",
    "Outbox",
    "OutboxEntry",
    "OutboxKind",
    "delivered",
    "delivered_sync",
    "error_summary",
    "is_final",
    "rebuild",
    "recorded_principal",
]

OutboxKind = Literal["send", "publish"]
"""How a message is delivered: `Mediator.send` or `Mediator.publish`."""

MAX_ORDERING_KEY_LENGTH: Final = 255
_LONGEST_ERROR: Final = 1000  # characters of a domain error's message kept


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One message as the outbox stores it.

    Attributes:
        id: The message id, also its idempotency key when delivered.
        kind: ``"send"`` for a command, ``"publish"`` for a notification.
        message_type: The class, as ``"module:QualName"``.
        payload: The message as JSON (pydantic's ``model_dump_json``).
        ordering_key: Messages with one key are delivered in the order recorded.
        principal: Who recorded it, as JSON (id, roles and the ``tenant``
            claim), or None for anonymous; it is delivered acting as them.
        correlation_id: The correlation id it was recorded under, or None.
        created_at: When it was recorded (UTC).
    """

    id: str
    kind: OutboxKind
    message_type: str
    payload: str
    ordering_key: str | None
    principal: str | None
    correlation_id: str | None
    created_at: datetime

    async def deliver(self, mediator: Mediator) -> None:
        """Send (or publish) this message through `mediator`, as it was recorded.

        Under the message id as the idempotency key, acting as the principal
        that recorded it, with its correlation id: what `OutboxRelay` does. For
        a queue of your own that carries entries (see "Effects after commit").

        Raises:
            ConfigurationError: The message's class is not loaded here.
            Exception: Whatever the handler raised; `is_final` says whether
                trying again can help.
        """
        await delivered(mediator, self)

    def deliver_sync(self, mediator: Mediator) -> None:
        """`deliver` without an event loop (`send_sync`, `publish_sync`)."""
        delivered_sync(mediator, self)

    @staticmethod
    def is_final(error: BaseException) -> bool:
        """Whether a delivery that raised `error` must not be tried again.

        A domain error other than `ConflictError`, a configuration error, or a
        payload that no longer fits its class; see `OutboxRelay`.
        """
        return is_final(error)


class Outbox(ABC):
    """Records commands and notifications to send once the transaction commits.

    Take it in the handler of a ``@transactional`` request; what you add is
    written in the handler's transaction (a row of ``mediator_outbox``) and
    sent by `mediator.sqlalchemy.OutboxRelay` after the commit, at least once,
    with the message id as the idempotency key: make the command
    ``@idempotent`` and its handler applies it once. A rolled-back attempt
    leaves nothing. `mediator.sqlalchemy.SqlAlchemyModule` binds it.

    Messages are stored in the clear: a message with a sensitive field
    (`Sensitive`, ``SecretStr``) is refused; record a reference to the secret
    instead.

    Example:
        >>> from injector import inject
        >>> from mediator import Command, CommandHandler, transactional
        >>> class ReserveStock(Command[None]):
        ...     order_id: str
        >>> @transactional
        ... class PlaceOrder(Command[str]):
        ...     order_id: str
        >>> class PlaceOrderHandler(CommandHandler[PlaceOrder, str]):
        ...     @inject
        ...     def __init__(self, outbox: Outbox) -> None:
        ...         self.outbox = outbox
        ...     async def handle(self, request: PlaceOrder) -> str:
        ...         # ... write the order on the session ...
        ...         return self.outbox.send(
        ...             ReserveStock(order_id=request.order_id),
        ...             ordering_key=request.order_id,
        ...         )
    """

    def send(self, command: Command[Any], *, ordering_key: str | None = None) -> str:
        """Send `command` with `Mediator.send` after the commit; its message id.

        Raises:
            TypeError: Not a command (a query changes nothing, so there is
                nothing to send later), or a bad `ordering_key`.
            ValueError: The command has a sensitive field.
            ConfigurationError: Not inside a ``@transactional`` handler.
        """
        given = cast(object, command)
        if not isinstance(given, Command) or isinstance(given, Query):
            shown = _described(given)
            hint = ": use publish()" if isinstance(given, Notification) else ""
            raise TypeError(f"Outbox.send() takes a Command, got {shown}{hint}")
        return self._add("send", command, ordering_key)

    def publish(
        self, notification: Notification, *, ordering_key: str | None = None
    ) -> str:
        """Publish `notification` with `Mediator.publish` after the commit; its id.

        Raises:
            TypeError: Not a notification, or a bad `ordering_key`.
            ValueError: The notification has a sensitive field.
            ConfigurationError: Not inside a ``@transactional`` handler.
        """
        given = cast(object, notification)
        if not isinstance(given, Notification):
            shown = _described(given)
            hint = ": use send()" if isinstance(given, Command) else ""
            raise TypeError(f"Outbox.publish() takes a Notification, got {shown}{hint}")
        return self._add("publish", notification, ordering_key)

    @abstractmethod
    def _record(self, entry: OutboxEntry) -> None:
        """Write `entry` in the running unit of work's transaction."""

    def _now(self) -> datetime:
        """When a message is recorded, and first due: the system's time.

        `SqlAlchemyOutbox` reads the bound `WallClock` instead.
        """
        return utc_now()

    def _add(
        self, kind: OutboxKind, message: Command[Any] | Notification, key: str | None
    ) -> str:
        _check_ordering_key(key)
        cls = type(message)
        secret = sensitive_fields(cls) | {
            name
            for name in cls.model_fields
            if _holds_secret(getattr(message, name), 0)
        }
        if secret:
            raise ValueError(
                f"{cls.__qualname__} has sensitive fields "
                f"({', '.join(sorted(secret))}): "
                "the outbox stores messages in the clear, so record a reference "
                "to the secret instead of the secret"
            )
        principal = current_principal()
        entry = OutboxEntry(
            id=str(uuid.uuid4()),
            kind=kind,
            message_type=f"{cls.__module__}:{cls.__qualname__}",
            payload=message.model_dump_json(),
            ordering_key=key,
            principal=None if principal is None else _principal_json(principal),
            correlation_id=current_correlation_id(),
            created_at=self._now(),
        )
        self._record(entry)
        return entry.id


_DEEPEST: Final = 32  # levels of nesting searched for a secret value


def _holds_secret(value: object, depth: int) -> bool:
    """Whether `value` is or holds a secret (a model's `Sensitive` field too).

    The JSON of a secret value is ``**********``: recorded, it would be
    delivered as that, not as the secret.
    """
    if isinstance(value, SecretStr | SecretBytes):
        return True
    if depth > _DEEPEST:
        return False
    members: Iterable[object]
    if isinstance(value, BaseModel):
        model = type(value)
        if sensitive_fields(model):
            return True
        members = [getattr(value, name) for name in model.model_fields]
    elif isinstance(value, Mapping):
        members = cast("Mapping[object, object]", value).values()
    elif isinstance(value, list | tuple | set | frozenset):
        members = cast("Iterable[object]", value)
    else:
        return False
    return any(_holds_secret(member, depth + 1) for member in members)


def _described(value: object) -> str:
    name = type(value).__qualname__
    return f"the query {name}" if isinstance(value, StreamQuery | Query) else name


def _check_ordering_key(key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str):
        raise TypeError(f"ordering_key must be a string or None, got {key!r}")
    if not 1 <= len(key) <= MAX_ORDERING_KEY_LENGTH:
        raise TypeError(
            f"ordering_key is 1 to {MAX_ORDERING_KEY_LENGTH} characters, got {len(key)}"
        )


def _principal_json(principal: Principal) -> str:
    """Who recorded a message: id, roles and the tenant claim; other claims stay."""
    record: dict[str, Any] = {"id": principal.id, "roles": sorted(principal.roles)}
    tenant: object = principal.claims.get("tenant")
    if tenant is not None:
        record["tenant"] = str(tenant)
    return json.dumps(record, separators=(",", ":"))


def recorded_principal(text: str) -> Principal:
    """The principal a stored record names, read as `_principal_json` wrote it.

    Raises:
        ValueError: Not that JSON; the message says what is wrong.
    """
    try:
        found: object = json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's stack
        raise ValueError("the principal is not JSON") from None
    if not isinstance(found, dict):
        raise ValueError("the principal is not a JSON object")
    record = cast(dict[str, object], found)
    identity, roles = record.get("id"), record.get("roles")
    if not (
        isinstance(identity, str)
        and isinstance(roles, list)
        and all(isinstance(role, str) for role in cast(list[object], roles))
    ):
        raise ValueError("the principal has no string id and list of roles")
    tenant = record.get("tenant")
    if "tenant" in record and not isinstance(tenant, str):
        raise ValueError("the principal's tenant is not a string")
    return Principal(
        identity,
        frozenset(cast(list[str], roles)),
        {"tenant": tenant} if "tenant" in record else {},
    )


def _principal_of(text: str | None) -> Principal | None:
    """The principal a record names; a record the outbox did not write is refused.

    Raises:
        ConfigurationError: Not the JSON `_principal_json` writes.
    """
    if text is None:
        return None
    try:
        return recorded_principal(text)
    except ValueError as error:
        raise ConfigurationError(
            f"the outbox message's principal is not one the outbox writes: {error}"
        ) from None


# --- delivery -------------------------------------------------------------------


def rebuild(kind: str, message_type: str, payload: str) -> Command[Any] | Notification:
    """The message a record holds, rebuilt; its class must already be loaded.

    Raises:
        ConfigurationError: The class is not loaded in this process (the relay
            did not import the module that defines it), or is not a `Command`
            (for ``"send"``) or `Notification` (for ``"publish"``).
        pydantic.ValidationError: The payload no longer fits the class.
    """
    module_name, _, qualname = message_type.partition(":")
    module = sys.modules.get(module_name)
    # Read from the module's namespace: getattr would run a module's own
    # __getattr__, which may import a module because of a stored name.
    found: object = None if module is None else vars(module).get(qualname.split(".")[0])
    for part in qualname.split(".")[1:] if found is not None else ():
        found = getattr(found, part, None)
    base = Command if kind == "send" else Notification
    if not (isinstance(found, type) and issubclass(found, base)) or (
        issubclass(found, Query)
    ):
        raise ConfigurationError(
            f"the outbox message type {message_type!r} is not a loaded "
            f"{base.__name__} class in this process: register the module that "
            "defines it with the relay's mediator"
        )
    model = cast(type[BaseModel], found)
    return cast(Command[Any] | Notification, model.model_validate_json(payload))


@contextmanager
def _as_recorded(
    message_id: str, principal: str | None, correlation: str | None
) -> Generator[None, None, None]:
    with ExitStack() as stack:
        stack.enter_context(minted_idempotency_key(message_id))
        stack.enter_context(acting_as(_principal_of(principal)))
        if correlation is not None:
            stack.enter_context(correlation_id(correlation))
        yield


async def delivered(mediator: Mediator, entry: OutboxEntry) -> None:
    """Send or publish `entry` through `mediator`, as it was recorded.

    Under ``idempotency_key(entry.id)``, acting as the principal that recorded
    it, with its correlation id.
    """
    message = rebuild(entry.kind, entry.message_type, entry.payload)
    with _as_recorded(entry.id, entry.principal, entry.correlation_id):
        if entry.kind == "send":
            await mediator.send(cast(Command[Any], message))
        else:
            await mediator.publish(cast(Notification, message))


def delivered_sync(mediator: Mediator, entry: OutboxEntry) -> None:
    """`delivered` without an event loop (`send_sync`, `publish_sync`)."""
    message = rebuild(entry.kind, entry.message_type, entry.payload)
    with _as_recorded(entry.id, entry.principal, entry.correlation_id):
        if entry.kind == "send":
            mediator.send_sync(cast(Command[Any], message))
        else:
            mediator.publish_sync(cast(Notification, message))


def is_final(error: BaseException) -> bool:
    """Whether a delivery that raised `error` must not be tried again.

    A domain error (the receiver refused the message) and a configuration
    error (no handler, a type not loaded) are final, as is a payload that no
    longer fits its class; so is a group of them only. A `ConflictError` is
    not: it says a duplicate of the message is still running (a relay whose
    lease ran out), or that a concurrent write won, and a later try may
    succeed. Anything else is transient.
    """
    if isinstance(error, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], error)
        return all(is_final(inner) for inner in group.exceptions)
    if isinstance(error, ConflictError):
        return False
    return isinstance(error, DomainError | ConfigurationError | PayloadError)


def error_summary(error: BaseException) -> str:
    """What a failed delivery records: redacted as audit records are.

    The exception's type name; for a domain or configuration error, which
    say what the receiver refused, its message too (cut to 1,000
    characters). Other messages may carry a URL, a query string or a token,
    and are not kept.
    """
    if isinstance(error, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], error)
        return "; ".join(error_summary(inner) for inner in group.exceptions)[
            :_LONGEST_ERROR
        ]
    name = type(error).__qualname__
    if isinstance(error, DomainError | ConfigurationError):
        return f"{name}: {str(error)[:_LONGEST_ERROR]}"
    return name
