"""The outbox handed off to a real Redis stream and delivered from it, sync.

A real `OutboxRelay` on a SQLite file writes each message to a stream of the
test session's ``redis-server``; a real `StreamConsumer` delivers it to an
``@idempotent`` receiver, which applies it once however often it is read.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import sqlalchemy as sa
from redis.backoff import NoBackoff
from redis.retry import Retry

from mediator.redis import StreamConsumer, StreamHandoff
from mediator.sqlalchemy import OutboxRelay, outbox_table
from tests.support.redis_server import RedisServer

from .app import App, Clock, Place, make_app

STREAM = "orders:outbox"
GROUP = "inventory"


@pytest.fixture
def app(tmp_path: Path) -> App:
    return make_app(tmp_path / "orders.db")


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    found = redis_server.client()
    yield found
    found.close()


def consumer_of(app: App, client: redis.Redis, **options: Any) -> StreamConsumer:
    options.setdefault("block", timedelta(milliseconds=50))
    return StreamConsumer(app.mediator, client, STREAM, GROUP, **options)


def rows(app: App) -> list[tuple[Any, ...]]:
    with app.engine.connect() as connection:
        found = connection.execute(
            sa.select(
                outbox_table.c.state,
                outbox_table.c.attempts,
                outbox_table.c.last_error,
                outbox_table.c.next_attempt_at,
            )
        )
        return [tuple(row) for row in found]


def handed_off(app: App, client: redis.Redis, *orders: str) -> list[str]:
    ids = [app.mediator.send_sync(Place(order_id=order)) for order in orders]
    relay = OutboxRelay(app.mediator, app.engine, handoff=StreamHandoff(client, STREAM))
    assert relay.run_once_sync() == len(orders)
    return ids


Entries = list[tuple[bytes, dict[bytes, bytes]]]


def read(client: redis.Redis, stream: str = STREAM) -> Entries:
    """The stream's entries, as this client (bytes, not decoded) reads them."""
    return cast(Entries, client.xrange(stream))


def pending_count(client: redis.Redis) -> int:
    summary: Any = client.xpending(STREAM, GROUP)
    return int(summary["pending"])


def test_the_relay_marks_a_message_delivered_once_it_is_on_the_stream(
    app: App, client: redis.Redis
) -> None:
    [message_id] = handed_off(app, client, "o-1")

    assert [row[:3] for row in rows(app)] == [("delivered", 1, None)]
    [(_, fields)] = read(client)
    assert fields[b"id"] == message_id.encode()
    assert fields[b"kind"] == b"send"
    assert fields[b"message_type"].endswith(b":Reserve")
    assert fields[b"ordering_key"] == b"o-1"
    assert b"principal" not in fields  # recorded anonymously: left out
    assert app.applications() == []  # the relay did not deliver it itself


def test_a_failed_xadd_leaves_the_message_pending_with_its_backoff(app: App) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # redis-py's own retries (with their sleeps) off: one refused connection.
    away = redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )
    app.mediator.send_sync(Place(order_id="o-1"))
    clock = Clock()  # after the commit: the message is due
    relay = OutboxRelay(
        app.mediator,
        app.engine,
        handoff=StreamHandoff(away, STREAM),
        clock=clock,
        random=lambda: 0.5,
    )

    assert relay.run_once_sync() == 1

    [(state, attempts, error, due)] = rows(app)
    assert (state, attempts, error) == ("pending", 1, "ConnectionError")
    assert due.replace(tzinfo=clock.at.tzinfo) > clock.at
    assert relay.run_once_sync() == 0  # not due again until the backoff is over
    away.close()


def test_the_consumer_applies_a_message_and_acknowledges_it(
    app: App, client: redis.Redis
) -> None:
    handed_off(app, client, "o-1")
    consumer = consumer_of(app, client)

    assert consumer.run_once_sync() == 1

    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0
    assert client.xlen(consumer.dead_stream) == 0
    assert consumer.run_once_sync() == 0  # nothing left


def test_an_entry_written_twice_is_applied_once(app: App, client: redis.Redis) -> None:
    """The relay's XADD reply was lost, so it wrote the message again."""
    handed_off(app, client, "o-1")
    [(_, fields)] = read(client)
    client.xadd(STREAM, cast(Any, fields))
    consumer = consumer_of(app, client)

    assert consumer.run_once_sync() == 2

    assert app.sightings.calls == ["o-1"]  # the second was a replay, not a call
    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0


class CrashBeforeAck(redis.Redis):
    """A client whose process dies after the delivery, before its XACK."""

    def xack(self, *args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt("the consumer's process died")


def test_a_crashed_consumers_entry_is_taken_over_and_applied_once(
    app: App, client: redis.Redis, redis_server: RedisServer
) -> None:
    handed_off(app, client, "o-1")
    crashing = CrashBeforeAck(
        host="127.0.0.1", port=redis_server.port, socket_timeout=2.0
    )
    with pytest.raises(KeyboardInterrupt):
        consumer_of(app, crashing, consumer="first").run_once_sync()
    crashing.close()
    assert app.applications() == ["o-1"]  # applied, never acknowledged
    assert pending_count(client) == 1

    second = consumer_of(app, client, consumer="second", min_idle=timedelta(0))
    assert second.run_once_sync() == 1

    assert app.sightings.calls == ["o-1"]  # the second delivery was a replay
    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0
    assert client.xlen(second.dead_stream) == 0


def test_an_entry_read_and_never_processed_is_delivered_by_another(
    app: App, client: redis.Redis
) -> None:
    handed_off(app, client, "o-1")
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, "crashed", {STREAM: ">"}, count=10)
    assert pending_count(client) == 1
    waiting = consumer_of(app, client, consumer="patient")  # min_idle: one minute

    assert waiting.run_once_sync() == 0  # not idle long enough to take over
    assert app.applications() == []

    eager = consumer_of(app, client, consumer="eager", min_idle=timedelta(0))
    assert eager.run_once_sync() == 1
    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0


def test_a_transient_failure_leaves_the_entry_pending_until_read_again(
    app: App, client: redis.Redis
) -> None:
    app.sightings.failures_left = 1
    handed_off(app, client, "o-1")
    consumer = consumer_of(app, client, min_idle=timedelta(0))

    assert consumer.run_once_sync() == 1
    assert app.applications() == []
    assert pending_count(client) == 1

    assert consumer.run_once_sync() == 1  # XAUTOCLAIM: idle for at least 0 ms
    assert app.sightings.calls == ["o-1", "o-1"]
    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0


def test_an_entry_failing_on_every_read_goes_dead_after_max_deliveries(
    app: App, client: redis.Redis
) -> None:
    app.sightings.failures_left = 100
    handed_off(app, client, "o-1")
    consumer = consumer_of(app, client, min_idle=timedelta(0), max_deliveries=3)

    for _ in range(3):
        assert consumer.run_once_sync() == 1
    assert consumer.run_once_sync() == 0

    assert app.sightings.calls == ["o-1"] * 3
    [(_, dead)] = read(client, consumer.dead_stream)
    assert dead[b"error"] == b"RuntimeError"  # redacted: no message, no token
    assert dead[b"deliveries"] == b"3"
    assert pending_count(client) == 0


def test_an_entry_read_too_often_without_an_answer_goes_dead_unread(
    app: App, client: redis.Redis
) -> None:
    """Each delivery killed its consumer: after max_deliveries, no more."""
    handed_off(app, client, "o-1")
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, "crashed", {STREAM: ">"})
    client.xautoclaim(STREAM, GROUP, "crashed-again", 0)  # read twice now
    consumer = consumer_of(app, client, min_idle=timedelta(0), max_deliveries=2)

    assert consumer.run_once_sync() == 1

    assert app.sightings.calls == []
    [(_, dead)] = read(client, consumer.dead_stream)
    assert dead[b"error"] == b"read 2 times and never acknowledged (max_deliveries=2)"
    assert dead[b"deliveries"] == b"3"


def test_a_domain_error_sends_the_entry_to_the_dead_stream_at_once(
    app: App, client: redis.Redis
) -> None:
    app.mediator.send_sync(Place(order_id="o-9", refused=True))
    relay = OutboxRelay(app.mediator, app.engine, handoff=StreamHandoff(client, STREAM))
    relay.run_once_sync()
    [(entry_id, original)] = read(client)
    consumer = consumer_of(app, client, dead_stream="orders:refused")

    assert consumer.run_once_sync() == 1

    [(_, dead)] = read(client, "orders:refused")
    assert dead[b"error"] == b"BusinessRuleError: order o-9 cannot be reserved"
    assert dead[b"entry_id"] == entry_id
    assert dead[b"deliveries"] == b"1"
    assert {key: dead[key] for key in original} == original
    assert pending_count(client) == 0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"id": "m-1"}, b"GarbledEntryError: the entry has no kind, message_type"),
        (
            {
                "id": "m-1",
                "kind": b"\xff\xfe",
                "message_type": "x:Y",
                "payload": "{}",
                "created_at": "2026-01-05T12:00:00+00:00",
            },
            b"GarbledEntryError: the field 'kind' is not UTF-8",
        ),
        (
            {
                "id": "m-1",
                "kind": "send",
                "message_type": "evil_module_never_loaded:Run",
                "payload": "{}",
                "created_at": "2026-01-05T12:00:00+00:00",
            },
            b"ConfigurationError: the outbox message type "
            b"'evil_module_never_loaded:Run' is not a loaded Command class",
        ),
        (
            {
                "id": "m-1",
                "kind": "send",
                "message_type": "os:system",
                "payload": "{}",
                "created_at": "2026-01-05T12:00:00+00:00",
            },
            b"ConfigurationError: the outbox message type 'os:system' is not",
        ),
        (
            {
                "id": "m-1",
                "kind": "send",
                "message_type": "tests.mediator.stream_handoff.app:Reserve",
                "payload": '{"order_id": 7}',
                "created_at": "2026-01-05T12:00:00+00:00",
            },
            b"ValidationError",
        ),
        (
            {
                "id": "m-1",
                "kind": "send",
                "message_type": "tests.mediator.stream_handoff.app:Reserve",
                "payload": '{"order_id": "o-1"}',
                "created_at": "2026-01-05T12:00:00+00:00",
                "principal": '{"id": "admin"}',
            },
            b"GarbledEntryError: the principal has no string id and list of roles",
        ),
    ],
    ids=["missing", "not-utf8", "unloaded", "not-a-command", "payload", "principal"],
)
def test_a_garbled_entry_goes_dead_with_its_reason_and_the_next_is_delivered(
    app: App, client: redis.Redis, fields: dict[str, Any], reason: bytes
) -> None:
    client.xadd(STREAM, cast(Any, fields))
    handed_off(app, client, "o-1")
    consumer = consumer_of(app, client)

    assert consumer.run_once_sync() == 2

    [(_, dead)] = read(client, consumer.dead_stream)
    assert dead[b"error"].startswith(reason), dead[b"error"]
    assert app.applications() == ["o-1"]
    assert pending_count(client) == 0
    assert "evil_module_never_loaded" not in sys.modules


def test_stop_ends_run_sync(app: App, client: redis.Redis) -> None:
    consumer = consumer_of(app, client)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            consumer.run_sync()
        except BaseException as error:  # shown by the assertion below
            failures.append(error)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    handed_off(app, client, "o-1")
    assert app.sightings.seen.wait(timeout=20)
    consumer.stop()
    worker.join(timeout=20)

    assert not worker.is_alive()
    assert failures == []
    assert app.applications() == ["o-1"]


def test_the_stream_deleted_under_the_consumer_is_made_again(
    app: App, client: redis.Redis
) -> None:
    consumer = consumer_of(app, client)
    assert consumer.run_once_sync() == 0
    client.delete(STREAM)

    assert consumer.run_once_sync() == 0  # NOGROUP: the group is made again
    handed_off(app, client, "o-1")
    assert consumer.run_once_sync() == 1
    assert app.applications() == ["o-1"]


def test_an_entry_whose_dead_write_fails_stays_pending_unacknowledged(
    app: App, client: redis.Redis
) -> None:
    consumer = consumer_of(app, client, min_idle=timedelta(0))
    client.set(consumer.dead_stream, "planted")  # not a stream: XADD fails
    client.xadd(STREAM, {"id": "m-1", "kind": "delete"})

    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        consumer.run_once_sync()

    assert pending_count(client) == 1  # kept for a later round, never dropped
    client.delete(consumer.dead_stream)
    assert consumer.run_once_sync() == 1  # taken over, and now dead
    [(_, dead)] = read(client, consumer.dead_stream)
    assert dead[b"error"].startswith(b"GarbledEntryError"), dead[b"error"]
    assert pending_count(client) == 0
