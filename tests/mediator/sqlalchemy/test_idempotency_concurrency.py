"""Duplicates racing for one key: 50 asyncio tasks, and 8 processes, on SQLite and
PostgreSQL. Exactly one claims it; every other one sees it in flight."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from queue import Empty

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from mediator import Claim
from mediator.sqlalchemy import AsyncSqlAlchemyIdempotencyStore, prepare_sqlite
from tests.mediator.sqlalchemy.claimers import claim_once
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    NOW,
    RESPONSE,
    SCOPE,
    Backend,
    claim,
)

pytestmark = pytest.mark.anyio

TASKS = 50
PROCESSES = 8


@pytest.mark.parametrize("pooled", [False, True], ids=["connection-each", "pool"])
async def test_fifty_concurrent_claims_of_one_key_claim_it_once(
    backend: Backend, pooled: bool
) -> None:
    """Each task on a connection of its own, or queued on the default pool."""
    engine = backend.async_engine
    if pooled:
        engine = create_async_engine(
            backend.url.replace("sqlite:", "sqlite+aiosqlite:")
        )
        prepare_sqlite(engine)
    store = AsyncSqlAlchemyIdempotencyStore(engine)
    try:
        answers = await asyncio.gather(*(claim(store) for _ in range(TASKS)))

        assert Counter(answer.status for answer in answers) == {
            "claimed": 1,
            "in_flight": TASKS - 1,
        }
        [winner] = [answer for answer in answers if answer.status == "claimed"]
        assert winner.token is not None
        assert [row.token for row in backend.rows()] == [winner.token]

        await store.finish(SCOPE, KEY, winner.token, RESPONSE, now=NOW)
        again = await asyncio.gather(*(claim(store) for _ in range(TASKS)))
        assert set(again) == {Claim("replay", outcome=RESPONSE)}
    finally:
        if pooled:
            await engine.dispose()


@pytest.mark.chaos  # load: eight processes at once (make chaos)
@pytest.mark.timeout(120)
def test_eight_processes_claiming_one_key_at_once_claim_it_once(
    backend: Backend,
) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    answers = context.Queue()
    workers = [
        context.Process(
            target=claim_once, args=(backend.url, NOW.isoformat(), start, answers)
        )
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        statuses = [answers.get(timeout=90) for _ in workers]
    except Empty:
        statuses = []
    finally:
        for worker in workers:
            worker.join(timeout=30)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        answers.close()

    assert Counter(statuses) == {"claimed": 1, "in_flight": PROCESSES - 1}
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    [row] = backend.rows()
    assert row.state == "pending"
