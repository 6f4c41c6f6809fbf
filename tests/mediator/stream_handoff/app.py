"""The application both ends of the hand-off run: an order recorded with its
stock reservation in the outbox, and the reservation applied once.

The relay (on a real SQLite file) hands the reservation to a real Redis
stream; a `StreamConsumer` delivers it to `ReserveHandler`, an
``@idempotent`` ``@transactional`` receiver that inserts one row per
application, so the rows counted are the applications made.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from injector import Binder, Injector, Module, inject
from sqlalchemy.orm import Session

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Outbox,
    idempotent,
    transactional,
)
from mediator._core.clock import utc_now
from mediator.sqlalchemy import (
    SqlAlchemyModule,
    create_idempotency_table,
    create_outbox_table,
)

metadata = sa.MetaData()
applied = sa.Table(
    "applied",
    metadata,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("order_id", sa.String, nullable=False),
)


@idempotent
@transactional
class Reserve(Command[None]):
    order_id: str


class Refuse(Command[None]):
    order_id: str


@transactional
class Place(Command[str]):
    order_id: str
    refused: bool = False


@dataclass
class Sightings:
    """What the receiver saw: each call (applied or not), and a wake-up."""

    calls: list[str] = field(default_factory=list[str])
    failures_left: int = 0
    seen: threading.Event = field(default_factory=threading.Event)


class PlaceHandler(CommandHandler[Place, str]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Place) -> str:
        if request.refused:
            return self.outbox.send(Refuse(order_id=request.order_id))
        return self.outbox.send(
            Reserve(order_id=request.order_id), ordering_key=request.order_id
        )


class ReserveHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: Session, sightings: Sightings) -> None:
        self.session, self.sightings = session, sightings

    def handle(self, request: Reserve) -> None:
        self.sightings.calls.append(request.order_id)
        if self.sightings.failures_left:
            self.sightings.failures_left -= 1
            raise RuntimeError("the inventory is away (token=s3cret)")
        self.session.execute(sa.insert(applied).values(order_id=request.order_id))
        self.sightings.seen.set()


class RefuseHandler(CommandHandler[Refuse, None]):
    def handle(self, request: Refuse) -> None:
        raise BusinessRuleError(f"order {request.order_id} cannot be reserved")


class Clock:
    """A wall clock that stands still (from the time it is made) until moved."""

    def __init__(self) -> None:
        self.at = utc_now()

    def now(self) -> datetime:
        return self.at


@dataclass
class App:
    engine: sa.Engine
    mediator: Mediator
    sightings: Sightings

    def applications(self) -> list[str]:
        with self.engine.connect() as connection:
            return list(
                connection.execute(sa.select(applied.c.order_id).order_by(applied.c.n))
                .scalars()
                .all()
            )


def make_app(path: Path) -> App:
    engine = sa.create_engine(f"sqlite:///{path}")
    metadata.create_all(engine)
    create_outbox_table(engine)
    create_idempotency_table(engine)
    sightings = Sightings()

    class Bindings(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Sightings, to=sightings)

    mediator = Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(
                    PlaceHandler, ReserveHandler, RefuseHandler
                ).use_defaults()
            ),
            SqlAlchemyModule(engine=engine),
            Bindings(),
        ]
    ).get(Mediator)
    return App(engine, mediator, sightings)
