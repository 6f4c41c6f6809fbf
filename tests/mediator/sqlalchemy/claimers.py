"""One process claiming one key, for the multi-process test (spawned: importable)."""

from __future__ import annotations

from datetime import datetime
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import sqlalchemy as sa

from mediator.sqlalchemy import SqlAlchemyIdempotencyStore, prepare_sqlite
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    LEASE,
    PRINT,
    RETENTION,
    SCOPE,
)


def claim_once(url: str, now: str, start: Barrier, answers: Queue[str]) -> None:
    """Connect, wait for the others at `start`, claim, and report the status."""
    engine = sa.create_engine(url)
    prepare_sqlite(engine)
    store = SqlAlchemyIdempotencyStore(engine)
    try:
        with engine.connect():
            pass  # connected (and configured) before the race starts
        start.wait(timeout=60)
        claim = store.claim(
            SCOPE,
            KEY,
            PRINT,
            now=datetime.fromisoformat(now),
            lease=LEASE,
            retention=RETENTION,
        )
        answers.put(claim.status)
    except BaseException as error:
        answers.put(f"error: {error!r}")
        raise
    finally:
        engine.dispose()
