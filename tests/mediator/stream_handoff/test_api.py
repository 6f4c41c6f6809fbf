"""`mediator.redis`'s names, its refusals at construction, and the entry format."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
from injector import Injector

from mediator import Mediator, MediatorModule
from mediator._dispatch.outbox import OutboxEntry
from mediator.redis import (
    GarbledEntryError,
    OutboxRecord,
    StreamConsumer,
    StreamHandoff,
)
from mediator.redis._entry import entry_fields, entry_of
from mediator.sqlalchemy import AsyncHandoff, Handoff

# A client that never connects: nothing here talks to Redis.
CLIENT = redis.Redis(host="127.0.0.1", port=1)
ENTRY = OutboxEntry(
    id="5f0c6a3e-1b2d-4c9e-8f00-0a1b2c3d4e5f",
    kind="publish",
    message_type="shop.events:OrderPlaced",
    payload='{"order_id":"o-1"}',
    ordering_key="o-1",
    principal='{"id":"ana","roles":["clerk"],"tenant":"t-1"}',
    correlation_id="c-7",
    created_at=datetime(2026, 1, 5, 12, 0, 30, 123456, tzinfo=UTC),
)


def mediator() -> Mediator:
    return Injector([MediatorModule(lambda m: None)]).get(Mediator)


def test_the_public_names_are_pinned_and_documented() -> None:
    import mediator.redis as module

    assert module.__all__ == [
        "GarbledEntryError",
        "OutboxRecord",
        "StreamConsumer",
        "StreamHandoff",
    ]
    for name in module.__all__:
        assert (getattr(module, name).__doc__ or "").strip(), name
        assert getattr(module, name).__module__ == "mediator.redis"


def test_importing_it_imports_no_sqlalchemy() -> None:
    program = (
        "import sys, json, mediator.redis; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'sqlalchemy', 'mediator_resilience', 'http_resilience', 'httpx'})))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert json.loads(shown) == []


def test_the_handoff_is_both_kinds_the_relay_takes() -> None:
    handoff = StreamHandoff(CLIENT, "s")
    assert isinstance(handoff, Handoff)
    assert isinstance(handoff, AsyncHandoff)
    assert handoff.stream == "s"


@pytest.mark.parametrize(
    ("arguments", "options", "error", "message"),
    [
        (("redis://x", "s"), {}, TypeError, r"takes a redis.Redis .* got str"),
        ((CLIENT, ""), {}, TypeError, r"stream=\.\.\.\) must be a non-empty string"),
        ((CLIENT, b"s"), {}, TypeError, r"stream=\.\.\.\) must be a non-empty string"),
        ((CLIENT, "s"), {"maxlen": 0}, TypeError, r"maxlen=\.\.\.\) must be an int"),
        ((CLIENT, "s"), {"maxlen": True}, TypeError, r"maxlen=\.\.\.\) must be an int"),
    ],
)
def test_the_handoff_refuses_wrong_arguments(
    arguments: tuple[Any, ...], options: dict[str, Any], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        StreamHandoff(*arguments, **options)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"mediator": object()}, TypeError, r"mediator=\.\.\.\) takes a Mediator"),
        ({"redis": "redis://x"}, TypeError, r"redis=\.\.\.\) takes a redis.Redis"),
        ({"stream": ""}, TypeError, r"stream=\.\.\.\) must be a non-empty string"),
        ({"group": None}, TypeError, r"group=\.\.\.\) must be a non-empty string"),
        ({"consumer": ""}, TypeError, r"consumer=\.\.\.\) must be a non-empty"),
        ({"batch": 0}, ValueError, r"batch=\.\.\.\) must be an int of at least 1"),
        ({"max_deliveries": 1.5}, ValueError, r"max_deliveries=\.\.\.\) must be"),
        ({"block": timedelta(0)}, ValueError, r"block=\.\.\.\) must be a positive"),
        ({"block": 1}, ValueError, r"block=\.\.\.\) must be a positive timedelta"),
        (
            {"min_idle": timedelta(seconds=-1)},
            ValueError,
            r"min_idle=\.\.\.\) must be a non-negative timedelta",
        ),
        ({"dead_stream": "s"}, ValueError, r"must differ from the stream 's'"),
    ],
)
def test_the_consumer_refuses_wrong_arguments(
    change: dict[str, Any], error: type, message: str
) -> None:
    arguments: dict[str, Any] = {
        "mediator": mediator(),
        "redis": CLIENT,
        "stream": "s",
        "group": "g",
    }
    arguments.update(change)
    with pytest.raises(error, match=message):
        StreamConsumer(**arguments)


def test_the_consumer_defaults() -> None:
    consumer = StreamConsumer(mediator(), redis.asyncio.Redis(), "s", "g")
    assert consumer.dead_stream == "s:dead"
    other = StreamConsumer(mediator(), CLIENT, "s", "g")
    assert consumer.consumer != other.consumer  # a random part each
    assert StreamConsumer(mediator(), CLIENT, "s", "g", consumer="c-1").consumer == (
        "c-1"
    )


def test_an_entry_round_trips_through_its_fields() -> None:
    fields = entry_fields(ENTRY)
    assert fields == {
        "id": ENTRY.id,
        "kind": "publish",
        "message_type": "shop.events:OrderPlaced",
        "payload": '{"order_id":"o-1"}',
        "created_at": "2026-01-05T12:00:30.123456+00:00",
        "ordering_key": "o-1",
        "principal": '{"id":"ana","roles":["clerk"],"tenant":"t-1"}',
        "correlation_id": "c-7",
    }
    as_read = {name.encode(): value.encode() for name, value in fields.items()}
    assert entry_of(as_read) == ENTRY
    assert entry_of(fields) == ENTRY


def test_fields_left_out_are_none_when_read() -> None:
    record: OutboxRecord = OutboxEntry(
        id="m-1",
        kind="send",
        message_type="a:B",
        payload="{}",
        ordering_key=None,
        principal=None,
        correlation_id=None,
        created_at=datetime(2026, 1, 5, tzinfo=UTC),
    )
    fields = entry_fields(record)
    assert set(fields) == {"id", "kind", "message_type", "payload", "created_at"}
    assert entry_of(fields) == record


def test_a_time_without_a_zone_is_read_as_utc() -> None:
    fields = {**entry_fields(ENTRY), "created_at": "2026-01-05T12:00:30"}
    assert entry_of(fields).created_at == datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kind": "delete"}, "the kind is 'delete', not send or publish"),
        ({"id": "has space"}, "the id is no idempotency key"),
        ({"id": "x" * 256}, "the id is no idempotency key"),
        ({"created_at": "yesterday"}, "created_at is not an ISO 8601 time"),
        ({"principal": "{"}, "the principal is not JSON"),
        ({"principal": "[]"}, "the principal is not a JSON object"),
        ({"principal": '{"id":"a","roles":"admin"}'}, "no string id and list of roles"),
        ({"principal": '{"id":"a","roles":[],"tenant":1}'}, "tenant is not a string"),
        ({"principal": "[" * 100_000 + "]" * 100_000}, "the principal is not JSON"),
        ({"payload": ""}, "the entry has no payload"),
        ({"payload": b"\xc3"}, "the field 'payload' is not UTF-8"),
        ({"payload": 7}, "the field 'payload' is a int"),
    ],
)
def test_a_garbled_entry_is_refused_with_its_reason(
    change: dict[str, object], reason: str
) -> None:
    fields: dict[Any, object] = {**entry_fields(ENTRY), **change}
    with pytest.raises(GarbledEntryError, match=reason[:30].replace("(", r"\(")):
        entry_of(fields)


def test_a_name_that_is_not_utf8_is_refused() -> None:
    fields: dict[Any, object] = {**entry_fields(ENTRY), b"\xff": b"x"}
    with pytest.raises(GarbledEntryError, match="the field 'name' is not UTF-8"):
        entry_of(fields)
