"""The full default chain: all four built-in behaviors and a retry, in stage order."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from injector import Binder, Injector, Module

from mediator import (
    AsyncUnitOfWork,
    AuditRecord,
    AuditSink,
    Clock,
    Command,
    CommandHandler,
    FieldError,
    Mediator,
    MediatorModule,
    Next,
    Policy,
    Principal,
    Stage,
    SyncNext,
    UnitOfWork,
    Validator,
    acting_as,
    authorize,
    register_behavior,
    transactional,
)

pytestmark = pytest.mark.anyio

TRACE: list[str] = []


class AllowAll(Policy["Transfer"]):
    def allows(self, principal: Principal, request: Transfer) -> bool:
        TRACE.append("authorization")
        return True


@transactional
@authorize(roles=["clerk"], policies=[AllowAll])
class Transfer(Command[str]):
    amount: int


class TransferValidator(Validator[Transfer]):
    def validate(self, request: Transfer) -> list[FieldError]:
        TRACE.append("validation")
        return []


class TransferHandler(CommandHandler[Transfer, str]):
    attempts: ClassVar[int] = 0

    def handle(self, request: Transfer) -> str:
        TransferHandler.attempts += 1
        TRACE.append("handler")
        if TransferHandler.attempts == 1:
            raise ConnectionError("first attempt fails")
        return "done"


class RetryOnce:
    stage = Stage.RETRY

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        TRACE.append("retry")
        try:
            return await next()
        except ConnectionError:
            return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        TRACE.append("retry")
        try:
            return next()
        except ConnectionError:
            return next()


class TracingUnit:
    def savepoint(self) -> TracingUnit:
        return TracingUnit()

    def begin(self) -> None:
        TRACE.append("begin")

    def commit(self) -> None:
        TRACE.append("commit")

    def rollback(self) -> None:
        TRACE.append("rollback")

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class TracingAsyncUnit:
    def savepoint(self) -> TracingAsyncUnit:
        return TracingAsyncUnit()

    async def begin(self) -> None:
        TRACE.append("begin")

    async def commit(self) -> None:
        TRACE.append("commit")

    async def rollback(self) -> None:
        TRACE.append("rollback")

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class TracingClock:
    """The audit behavior reads the clock first on entry and last on exit."""

    def monotonic(self) -> float:
        TRACE.append("clock")
        return 0.0

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the audit behavior never sleeps")

    def sleep_sync(self, seconds: float) -> None:
        raise AssertionError("the audit behavior never sleeps")


class Records:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def is_enabled(self) -> bool:
        return True

    def write(self, record: AuditRecord) -> None:
        TRACE.append("audit")
        self.records.append(record)


class Fakes(Module):
    def __init__(self, sink: Records) -> None:
        self.sink = sink

    def configure(self, binder: Binder) -> None:
        binder.bind(AuditSink, to=self.sink)
        binder.bind(Clock, to=TracingClock())
        binder.bind(UnitOfWork, to=TracingUnit)
        binder.bind(AsyncUnitOfWork, to=TracingAsyncUnit)
        register_behavior(binder, RetryOnce)  # from another module, registered first


EXPECTED = [
    "clock",  # audit enters
    "validation",
    "authorization",
    "retry",
    "begin", "handler", "rollback",  # the first attempt, in its own transaction
    "begin", "handler", "commit",  # the second attempt, in a fresh one
    "clock", "audit",  # one record for the whole request
]  # fmt: skip


def build(sink: Records) -> Mediator:
    module = MediatorModule(
        lambda m: (
            m.add_handler(TransferHandler)
            .add_validator(TransferValidator)
            .use_defaults()
        )
    )
    return Injector([Fakes(sink), module]).get(Mediator)


@pytest.fixture(autouse=True)
def _reset() -> None:
    TRACE.clear()
    TransferHandler.attempts = 0


async def test_the_default_chain_runs_in_stage_order_with_retry_inside_it() -> None:
    sink = Records()
    mediator = build(sink)

    with acting_as(Principal("u-1", roles=frozenset({"clerk"}))):
        assert await mediator.send(Transfer(amount=5)) == "done"

    assert TRACE == EXPECTED
    assert [(r.request_type, r.outcome, r.principal) for r in sink.records] == [
        ("Transfer", "ok", "u-1")
    ]


def test_the_sync_path_runs_the_same_chain() -> None:
    sink = Records()
    mediator = build(sink)

    with acting_as(Principal("u-1", roles=frozenset({"clerk"}))):
        assert mediator.send_sync(Transfer(amount=5)) == "done"

    assert TRACE == EXPECTED
