"""AuditBehavior: one record per request, with sensitive fields kept out."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, cast

import pytest
from injector import Binder, Injector, Module, inject
from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr

from mediator import (
    AuditRecord,
    AuditSink,
    Clock,
    Command,
    CommandHandler,
    Mediator,
    MediatorConfig,
    MediatorModule,
    Next,
    Principal,
    Sensitive,
    Stage,
    StreamHandler,
    StreamQuery,
    acting_as,
    correlation_id,
)

pytestmark = pytest.mark.anyio

REDACTED = "[redacted]"


class FakeClock:
    """A `Clock` that only moves when told to, and counts how often it is read."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def sleep_sync(self, seconds: float) -> None:
        self.now += seconds


class RecordingSink:
    """An `AuditSink` that keeps every record; it can be switched off."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.asked = 0
        self.records: list[AuditRecord] = []

    def is_enabled(self) -> bool:
        self.asked += 1
        return self.enabled

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)


class Card(BaseModel):
    holder: str
    number: SecretStr


class Line(BaseModel):
    sku: str
    gift_message: Annotated[str, Sensitive()]


class Pay(Command[str]):
    shop: str
    amount: int
    password: SecretStr
    pin: SecretBytes
    token: Annotated[str, Sensitive()]
    card: Card
    lines: list[Line]


def a_payment(**changes: Any) -> Pay:
    fields: dict[str, Any] = {
        "shop": "ACME-STORE",
        "amount": 12,
        "password": SecretStr("hunter2"),
        "pin": SecretBytes(b"4321"),
        "token": "tok-s3cret",
        "card": Card(holder="Ada Lovelace", number=SecretStr("4111111111111111")),
        "lines": [
            Line(sku="A-1", gift_message="happy birthday"),
            Line(sku="B-2", gift_message="get well"),
        ],
    }
    fields.update(changes)
    return Pay(**fields)


PAY_FIELDS = {
    "shop": "ACME-STORE",
    "amount": 12,
    "password": REDACTED,
    "pin": REDACTED,
    "token": REDACTED,
    "card": {"holder": "Ada Lovelace", "number": REDACTED},
    "lines": [
        {"sku": "A-1", "gift_message": REDACTED},
        {"sku": "B-2", "gift_message": REDACTED},
    ],
}


class Gateway:
    class DeclinedError(Exception):
        """Nested, so its qualified name differs from its plain name."""


class PayHandler(CommandHandler[Pay, str]):
    """Takes a quarter of a second on the fake clock; a negative amount fails."""

    @inject
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def handle(self, request: Pay) -> str:
        self.clock.advance(0.25)
        if request.amount < 0:
            raise Gateway.DeclinedError(f"cannot pay {request.amount}")
        return f"paid {request.amount}"


class Ticks(StreamQuery[int]):
    count: int


class TicksHandler(StreamHandler[Ticks, int]):
    @inject
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    async def handle(self, query: Ticks) -> AsyncIterator[int]:
        for tick in range(query.count):
            self.clock.advance(0.5)
            yield tick


class Retry:
    """Retry-like: a failed first attempt is run again; it records each attempt."""

    stage = Stage.RETRY

    def __init__(self) -> None:
        self.attempts: list[str] = []

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        try:
            result = await next()
        except Gateway.DeclinedError:
            self.attempts.append("failed")
        else:
            self.attempts.append("ok")
            return result
        result = await next()
        self.attempts.append("ok")
        return result


class Infrastructure(Module):
    """Binds the fake clock (as `Clock` too) and, when given, a sink."""

    def __init__(self, clock: FakeClock, sink: AuditSink | None = None) -> None:
        self.clock = clock
        self.sink = sink

    def configure(self, binder: Binder) -> None:
        binder.bind(Clock, to=self.clock)
        binder.bind(FakeClock, to=self.clock)
        if self.sink is not None:
            binder.bind(AuditSink, to=self.sink)


def defaults(m: MediatorConfig) -> None:
    m.add_handler(PayHandler, TicksHandler).use_defaults()


def build(clock: FakeClock, sink: AuditSink | None = None) -> Mediator:
    return Injector([MediatorModule(defaults), Infrastructure(clock, sink)]).get(
        Mediator
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


async def test_a_request_gives_one_record_with_everything_it_names(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    with acting_as(Principal("u-7")), correlation_id("c-42"):
        assert await mediator.send(a_payment()) == "paid 12"

    assert sink.records == [
        AuditRecord(
            request_type="Pay",
            outcome="ok",
            duration=0.25,
            principal="u-7",
            correlation_id="c-42",
            fields=PAY_FIELDS,
            replayed=False,
        )
    ]


async def test_anonymous_and_uncorrelated_requests_record_none(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    await mediator.send(a_payment())

    [record] = sink.records
    assert record.principal is None
    assert record.correlation_id is None


async def test_a_failure_is_recorded_by_qualified_name_and_reraised_unchanged(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    with pytest.raises(Gateway.DeclinedError, match="cannot pay -5") as caught:
        await mediator.send(a_payment(amount=-5))

    assert type(caught.value) is Gateway.DeclinedError
    assert [(r.outcome, r.duration) for r in sink.records] == [
        ("Gateway.DeclinedError", 0.25)
    ]


async def test_one_record_per_request_however_often_next_is_called(
    clock: FakeClock, sink: RecordingSink
) -> None:
    retry = Retry()
    module = MediatorModule(
        lambda m: m.add_handler(PayHandler).add_behavior(retry).use_defaults()
    )
    mediator = Injector([module, Infrastructure(clock, sink)]).get(Mediator)

    # Every attempt fails: the retry runs the chain below it twice.
    with pytest.raises(Gateway.DeclinedError):
        await mediator.send(a_payment(amount=-1))
    assert retry.attempts == ["failed"]
    assert await mediator.send(a_payment(amount=3)) == "paid 3"

    assert [(r.outcome, r.duration) for r in sink.records] == [
        ("Gateway.DeclinedError", 0.5),  # both attempts, one record
        ("ok", 0.25),
    ]


async def test_a_retried_attempt_that_succeeds_is_one_ok_record(
    clock: FakeClock, sink: RecordingSink
) -> None:
    class FlakyOnce:
        """Inside retry: fails the first attempt of every request."""

        stage = Stage(450, "FLAKY")

        def __init__(self) -> None:
            self.calls = 0

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            self.calls += 1
            if self.calls == 1:
                clock.advance(1.0)
                raise Gateway.DeclinedError("transient")
            return await next()

    retry = Retry()
    module = MediatorModule(
        lambda m: (
            m.add_handler(PayHandler).add_behavior(FlakyOnce(), retry).use_defaults()
        )
    )
    mediator = Injector([module, Infrastructure(clock, sink)]).get(Mediator)

    assert await mediator.send(a_payment()) == "paid 12"

    assert retry.attempts == ["failed", "ok"]
    assert [(r.outcome, r.duration) for r in sink.records] == [("ok", 1.25)]


async def test_sensitive_fields_are_redacted_at_every_depth(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    await mediator.send(a_payment())

    [record] = sink.records
    assert record.fields == PAY_FIELDS
    text = repr(record)
    for secret in ("hunter2", "4321", "tok-s3cret", "4111", "birthday", "get well"):
        assert secret not in text


async def test_a_sensitive_field_that_is_optional_or_in_a_list_is_redacted_too(
    clock: FakeClock, sink: RecordingSink
) -> None:
    class Enrol(Command[str]):
        name: str
        ssn: Annotated[str, Sensitive()] | None = None
        recovery_codes: list[Annotated[str, Sensitive()]]

    class EnrolHandler(CommandHandler[Enrol, str]):
        def handle(self, request: Enrol) -> str:
            return "enrolled"

    module = MediatorModule(lambda m: m.add_handler(EnrolHandler).use_defaults())
    mediator = Injector([module, Infrastructure(clock, sink)]).get(Mediator)

    await mediator.send(
        Enrol(name="Ada", ssn="078-05-1120", recovery_codes=["r-1", "r-2"])
    )

    [record] = sink.records
    leaked = [s for s in ("078-05-1120", "r-1", "r-2") if s in repr(record.fields)]
    assert leaked == []
    assert record.fields["name"] == "Ada"
    assert record.fields["ssn"] == REDACTED


async def test_a_disabled_sink_is_asked_once_and_never_written_to(
    clock: FakeClock,
) -> None:
    sink = RecordingSink(enabled=False)
    mediator = build(clock, sink)

    assert await mediator.send(a_payment()) == "paid 12"
    assert mediator.send_sync(a_payment(amount=2)) == "paid 2"
    assert [t async for t in mediator.stream(Ticks(count=2))] == [0, 1]

    assert sink.asked == 3
    assert sink.records == []
    assert clock.reads == 0  # no timing either


def test_send_sync_writes_one_record(clock: FakeClock, sink: RecordingSink) -> None:
    mediator = build(clock, sink)

    with acting_as(Principal("u-1")), correlation_id("c-sync"):
        assert mediator.send_sync(a_payment()) == "paid 12"
    with pytest.raises(Gateway.DeclinedError):
        mediator.send_sync(a_payment(amount=-1))

    assert sink.records == [
        AuditRecord("Pay", "ok", 0.25, "u-1", "c-sync", PAY_FIELDS),
        AuditRecord(
            "Pay",
            "Gateway.DeclinedError",
            0.25,
            None,
            None,
            {**PAY_FIELDS, "amount": -1},
        ),
    ]


async def test_a_stream_writes_one_record_when_it_ends(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    with acting_as(Principal("u-2")), correlation_id("c-stream"):
        assert [t async for t in mediator.stream(Ticks(count=3))] == [0, 1, 2]

    assert sink.records == [
        AuditRecord("Ticks", "ok", 1.5, "u-2", "c-stream", {"count": 3})
    ]


async def test_a_stream_closed_early_writes_one_record_when_closed(
    clock: FakeClock, sink: RecordingSink
) -> None:
    mediator = build(clock, sink)

    stream = mediator.stream(Ticks(count=10))
    assert await anext(stream) == 0
    assert await anext(stream) == 1
    assert sink.records == []  # still open
    await stream.aclose()

    assert [(r.request_type, r.outcome, r.duration) for r in sink.records] == [
        ("Ticks", "closed", 1.0)
    ]


# --- the default sink: the "mediator.audit" logger ------------------------------


def audit_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mediator.audit"]


async def test_the_default_sink_logs_one_info_line_without_field_values(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediator.audit")
    mediator = build(clock)  # no sink bound: the default LoggingAuditSink

    with acting_as(Principal("u-9")):
        await mediator.send(a_payment())

    [log] = audit_logs(caplog)
    assert log.levelno == logging.INFO
    assert log.getMessage() == "Pay ok in 250.0 ms"
    assert "hunter2" not in log.getMessage()  # a secret
    assert "ACME-STORE" not in log.getMessage()  # an ordinary field's value
    assert log.__dict__["audit"] == AuditRecord(
        "Pay", "ok", 0.25, "u-9", None, PAY_FIELDS
    )


async def test_the_default_sink_names_the_error_in_its_message(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mediator.audit")
    mediator = build(clock)

    with pytest.raises(Gateway.DeclinedError):
        await mediator.send(a_payment(amount=-1))

    assert [log.getMessage() for log in audit_logs(caplog)] == [
        "Pay Gateway.DeclinedError in 250.0 ms"
    ]


async def test_the_default_sink_does_nothing_when_its_logger_is_disabled(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mediator.audit")
    mediator = build(clock)

    assert await mediator.send(a_payment()) == "paid 12"
    assert mediator.send_sync(a_payment()) == "paid 12"

    assert audit_logs(caplog) == []
    assert clock.reads == 0  # no record was even started


# --- replacing the default sink --------------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_sink_bound_in_any_module_replaces_the_default(
    clock: FakeClock,
    sink: RecordingSink,
    caplog: pytest.LogCaptureFixture,
    where: str,
) -> None:
    caplog.set_level(logging.INFO, logger="mediator.audit")
    ours, theirs = Infrastructure(clock, sink), MediatorModule(defaults)
    modules: list[Module] = [ours, theirs] if where == "before" else [theirs, ours]
    mediator = Injector(modules).get(Mediator)

    await mediator.send(a_payment())

    assert [r.request_type for r in sink.records] == ["Pay"]
    assert audit_logs(caplog) == []


# --- redaction through dataclasses, attrs classes, tuples, lists, dicts ---------


@dataclass(frozen=True)
class Account:
    iban: Annotated[str, Sensitive()]
    bank: str


@dataclass(frozen=True)
class Wallet:
    owner: str
    account: Account
    backups: tuple[Account, ...] = ()


@dataclass(frozen=True)
class FakeAttribute:
    """What attrs puts in `__attrs_attrs__` (attrs is not a dependency)."""

    name: str
    type: Any = None


class Device:
    """Shaped like an attrs class: attributes listed in `__attrs_attrs__`."""

    __attrs_attrs__ = (
        FakeAttribute("label"),
        FakeAttribute("secret", Annotated[str, Sensitive()]),
    )

    def __init__(self, label: str, secret: str) -> None:
        self.label = label
        self.secret = secret


class Transfer(Command[str]):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    wallet: Wallet
    devices: list[Device]
    by_name: dict[str, Account]
    pair: tuple[Account, Card]
    anything: Any = None


class TransferHandler(CommandHandler[Transfer, str]):
    def handle(self, request: Transfer) -> str:
        return "moved"


def transfer_mediator(clock: FakeClock, sink: RecordingSink) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(TransferHandler).use_defaults())
    return Injector([module, Infrastructure(clock, sink)]).get(Mediator)


TRANSFER_SECRETS = ("DE-1-s3cret", "DE-2-s3cret", "DE-3-s3cret", "dev-s3cret")


def a_transfer(**changes: Any) -> Transfer:
    fields: dict[str, Any] = {
        "wallet": Wallet(
            owner="Ada",
            account=Account(iban="DE-1-s3cret", bank="B1"),
            backups=(Account(iban="DE-2-s3cret", bank="B2"),),
        ),
        "devices": [Device("phone", "dev-s3cret")],
        "by_name": {"main": Account(iban="DE-3-s3cret", bank="B3")},
        "pair": (
            Account(iban="DE-1-s3cret", bank="B1"),
            Card(holder="Ada", number=SecretStr("4111111111111111")),
        ),
    }
    fields.update(changes)
    return Transfer(**fields)


async def test_sensitive_fields_in_dataclasses_and_attrs_classes_are_redacted(
    clock: FakeClock, sink: RecordingSink
) -> None:
    await transfer_mediator(clock, sink).send(a_transfer())

    [record] = sink.records
    leaked = [s for s in (*TRANSFER_SECRETS, "4111") if s in repr(record)]
    assert leaked == []
    redacted_account = {"iban": REDACTED, "bank": "B1"}
    assert record.fields == {
        "wallet": {
            "owner": "Ada",
            "account": redacted_account,
            "backups": [{"iban": REDACTED, "bank": "B2"}],
        },
        "devices": [{"label": "phone", "secret": REDACTED}],
        "by_name": {"main": {"iban": REDACTED, "bank": "B3"}},
        "pair": [redacted_account, {"holder": "Ada", "number": REDACTED}],
        "anything": None,
    }


async def test_values_of_any_type_are_redacted_through_every_container(
    clock: FakeClock, sink: RecordingSink
) -> None:
    account = Account(iban="DE-1-s3cret", bank="B1")
    nested: Any = {"a": [({"b": account},)], "c": {Device("tablet", "dev-s3cret")}}

    await transfer_mediator(clock, sink).send(a_transfer(anything=nested))

    [record] = sink.records
    assert [s for s in TRANSFER_SECRETS if s in repr(record)] == []
    assert record.fields["anything"] == {
        "a": [[{"b": {"iban": REDACTED, "bank": "B1"}}]],
        "c": [{"label": "tablet", "secret": REDACTED}],
    }


async def test_a_cycle_or_a_deep_nesting_is_cut_off_without_leaking(
    clock: FakeClock, sink: RecordingSink
) -> None:
    loop: list[Any] = [Account(iban="DE-1-s3cret", bank="B1")]
    loop.append(loop)
    deep: Any = Account(iban="DE-2-s3cret", bank="B2")
    for _ in range(1000):
        deep = [deep]

    await transfer_mediator(clock, sink).send(a_transfer(anything=[loop, deep]))

    [record] = sink.records
    assert [s for s in TRANSFER_SECRETS if s in repr(record)] == []
    cycle, innermost = record.fields["anything"]
    assert cycle == [{"iban": REDACTED, "bank": "B1"}, "[cycle]"]
    levels = 0
    while isinstance(innermost, list):
        innermost = cast("list[object]", innermost)[0]
        levels += 1
    assert innermost == "[too deep]"
    assert levels < 100


async def test_a_shared_value_is_not_taken_for_a_cycle(
    clock: FakeClock, sink: RecordingSink
) -> None:
    account = Account(iban="DE-1-s3cret", bank="B1")

    await transfer_mediator(clock, sink).send(a_transfer(anything=[account, account]))

    [record] = sink.records
    assert record.fields["anything"] == [{"iban": REDACTED, "bank": "B1"}] * 2


async def test_a_local_dataclass_with_unresolvable_annotations_is_redacted(
    clock: FakeClock, sink: RecordingSink
) -> None:
    # Under `from __future__ import annotations` a local class's annotations are
    # strings that name locals, which no one can resolve later.
    @dataclass
    class Key:
        value: Annotated[str, Sensitive()]
        label: str

    @dataclass
    class Ring:
        key: Key
        name: str

    ring = Ring(Key("key-s3cret", "front door"), "home")
    await transfer_mediator(clock, sink).send(a_transfer(anything=ring))

    [record] = sink.records
    assert record.fields["anything"] == {
        "key": {"value": REDACTED, "label": "front door"},
        "name": "home",
    }
