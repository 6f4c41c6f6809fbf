"""A duration too long for a datetime is refused when the relay is built (or the
purge is asked), not at its first round, where `now + lease` would overflow."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector

from mediator import Mediator, MediatorModule
from mediator.sqlalchemy import OutboxRelay


@pytest.fixture
def relay_parts() -> tuple[Mediator, sa.Engine]:
    mediator = Injector([MediatorModule(lambda m: m.use_defaults())]).get(Mediator)
    return mediator, sa.create_engine("sqlite://")


@pytest.mark.parametrize("name", ["lease", "base_delay", "max_delay", "poll_interval"])
def test_a_huge_duration_is_refused_when_built(
    relay_parts: tuple[Mediator, sa.Engine], name: str
) -> None:
    mediator, engine = relay_parts
    options: dict[str, Any] = {name: timedelta.max}
    with pytest.raises(ValueError, match=rf"OutboxRelay\({name}=\.\.\.\).*at most"):
        OutboxRelay(mediator, engine, **options)


def test_a_huge_retention_is_refused_before_the_database_is_asked(
    relay_parts: tuple[Mediator, sa.Engine],
) -> None:
    relay = OutboxRelay(*relay_parts)
    with pytest.raises(ValueError, match=r"older_than=\.\.\.\).*at most"):
        relay.purge_delivered_sync(timedelta.max)
    # A long retention (a year) is fine; an empty memory database has no table.
    with pytest.raises(Exception, match="mediator_outbox"):
        relay.purge_delivered_sync(timedelta(days=365))
