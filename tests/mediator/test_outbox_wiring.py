"""A handler that takes the `Outbox` for a request that is not `@transactional`
fails the build, naming the handler, the request and the fix; a transactional
one builds, and a notification handler (which may run in a transaction) is left
to the outbox's own check at its first send."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from injector import Injector, inject

from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    Mediator,
    MediatorModule,
    Notification,
    NotificationHandler,
    Outbox,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule


class Loose(Command[None]):
    pass


@transactional
class Kept(Command[None]):
    pass


class Happened(Notification):
    pass


class LooseHandler(CommandHandler[Loose, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Loose) -> None:
        self.outbox.send(Kept())


class KeptHandler(CommandHandler[Kept, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Kept) -> None:
        self.outbox.publish(Happened())


class HappenedHandler(NotificationHandler[Happened]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, notification: Happened) -> None:
        self.outbox.send(Kept())


def build(*handlers: type) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(*handlers).use_defaults())
    engine = sa.create_engine("sqlite://")
    return Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)


def test_an_outbox_in_the_handler_of_a_plain_request_fails_the_build() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"handler LooseHandler .* takes the Outbox, but Loose .* is not "
        r"@transactional: .* mark the request @transactional",
    ):
        build(LooseHandler, KeptHandler)


def test_a_transactional_request_and_a_notification_handler_build() -> None:
    mediator = build(KeptHandler, HappenedHandler)

    # Published outside any transaction, the notification handler's send is
    # refused by the outbox itself.
    with pytest.raises(ExceptionGroup) as raised:
        mediator.publish_sync(Happened())
    (inner,) = raised.value.exceptions
    assert isinstance(inner, ConfigurationError)
    assert "call them in the handler of a @transactional request" in str(inner)
