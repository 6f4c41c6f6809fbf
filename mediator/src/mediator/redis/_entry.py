"""An outbox message as one Redis Streams entry, and back.

No I/O and no ``redis`` here: the fields a `StreamHandoff` writes, and the
checks a `StreamConsumer` makes before it delivers what it read. A stream can
hold anything another program wrote, so reading never trusts an entry: a
missing field, bytes that are not UTF-8, an unknown kind, a principal or a
time that does not parse make the entry garbled (`GarbledEntryError`), which
the consumer moves to its dead stream with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Protocol, cast, get_args

from mediator._behaviors.idempotency.marker import check_key
from mediator._core.errors import MediatorError
from mediator._dispatch.outbox import OutboxEntry, OutboxKind, recorded_principal

__all__ = ["GarbledEntryError", "OutboxRecord", "entry_fields", "entry_of"]

_REQUIRED: Final = ("id", "kind", "message_type", "payload", "created_at")
_OPTIONAL: Final = ("ordering_key", "principal", "correlation_id")
_KINDS: Final = frozenset(get_args(OutboxKind))


class OutboxRecord(Protocol):
    """What a handoff needs of an outbox message: what was recorded.

    `mediator.sqlalchemy.OutboxMessage` is one (and so is the `OutboxEntry`
    it holds); a handoff takes it by these fields alone.
    """

    @property
    def id(self) -> str:
        """The message id, its idempotency key when delivered."""
        ...

    @property
    def kind(self) -> OutboxKind:
        """``"send"`` (a command) or ``"publish"`` (a notification)."""
        ...

    @property
    def message_type(self) -> str:
        """Its class, ``"module:QualName"``."""
        ...

    @property
    def payload(self) -> str:
        """The message as JSON."""
        ...

    @property
    def ordering_key(self) -> str | None:
        """Its ordering key, or None."""
        ...

    @property
    def principal(self) -> str | None:
        """Who recorded it, as JSON, or None."""
        ...

    @property
    def correlation_id(self) -> str | None:
        """Its correlation id, or None."""
        ...

    @property
    def created_at(self) -> datetime:
        """When its transaction recorded it."""
        ...


class GarbledEntryError(MediatorError, ValueError):
    """A stream entry that is not an outbox message a consumer can deliver.

    `StreamConsumer` never raises it: it moves such an entry to its dead
    stream, with ``GarbledEntryError: <what is wrong>`` as the reason.
    """


def entry_fields(message: OutboxRecord) -> dict[str, str]:
    """The fields of one stream entry holding `message` (a None is left out)."""
    fields = {
        "id": message.id,
        "kind": message.kind,
        "message_type": message.message_type,
        "payload": message.payload,
        "created_at": message.created_at.isoformat(),
    }
    for name, value in (
        ("ordering_key", message.ordering_key),
        ("principal", message.principal),
        ("correlation_id", message.correlation_id),
    ):
        if value is not None:
            fields[name] = value
    return fields


def _text(value: object, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise GarbledEntryError(f"the field {name!r} is not UTF-8") from None
    raise GarbledEntryError(f"the field {name!r} is a {type(value).__qualname__}")


def _created_at(text: str) -> datetime:
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise GarbledEntryError("created_at is not an ISO 8601 time") from None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found


def entry_of(fields: Mapping[Any, object]) -> OutboxEntry:
    """The outbox message a stream entry holds, checked; not yet rebuilt.

    Raises:
        GarbledEntryError: A field is missing, not UTF-8 or does not parse.
    """
    text: dict[str, str] = {}
    for raw_name, raw_value in fields.items():
        name = _text(raw_name, "name")
        if name in _REQUIRED or name in _OPTIONAL:
            text[name] = _text(raw_value, name)
    missing = [name for name in _REQUIRED if not text.get(name)]
    if missing:
        raise GarbledEntryError(f"the entry has no {', '.join(missing)}")
    problem = check_key(text["id"])
    if problem is not None:
        raise GarbledEntryError(f"the id is no idempotency key: {problem}")
    kind = text["kind"]
    if kind not in _KINDS:
        raise GarbledEntryError(f"the kind is {kind[:40]!r}, not send or publish")
    principal = text.get("principal")
    if principal is not None:
        try:
            recorded_principal(principal)
        except ValueError as error:
            raise GarbledEntryError(str(error)) from None
    return OutboxEntry(
        id=text["id"],
        kind=cast(OutboxKind, kind),
        message_type=text["message_type"],
        payload=text["payload"],
        ordering_key=text.get("ordering_key"),
        principal=principal,
        correlation_id=text.get("correlation_id"),
        created_at=_created_at(text["created_at"]),
    )
