"""Relays as worker processes (``python -m mediator.sqlalchemy.outbox``) for tests.

Each relay runs `tests.support.outbox_relay_app:build_relay` in a process of its
own, configured by its environment; its stderr (the worker's log) goes to a file
that a failing test shows. `wait_until` polls for what the processes do, bounded
in count and time; nothing here sleeps for time to pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import sqlalchemy as sa

from mediator.sqlalchemy import (
    create_idempotency_table,
    create_outbox_table,
    idempotency_table,
    outbox_table,
)
from tests.support.outbox_relay_app import metadata

ROOT: Final = Path(__file__).resolve().parents[2]
TARGET: Final = "tests.support.outbox_relay_app:build_relay"
STEP: Final = 0.05  # seconds between two looks


@dataclass
class RelayProcess:
    """One relay worker process and the file its log goes to."""

    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM; its exit status once it has stopped."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


def worker_command(target: str = TARGET, *options: str) -> list[str]:
    return [sys.executable, "-m", "mediator.sqlalchemy.outbox", target, *options]


def start_relay(
    url: str, log: Path, *, is_async: bool = False, **settings: str
) -> RelayProcess:
    """A relay process on `url`; `settings` are OUTBOX_APP_* variables, lower-case."""
    env = dict(os.environ)
    env["OUTBOX_APP_URL"] = url
    env["OUTBOX_APP_ASYNC"] = "1" if is_async else "0"
    for name, value in settings.items():
        env[f"OUTBOX_APP_{name.upper()}"] = value
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            worker_command(),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return RelayProcess(process, log)


@contextmanager
def relays_ended(relays: list[RelayProcess]) -> Generator[list[RelayProcess]]:
    """Kill whatever is still running of `relays` at the end, whatever happened."""
    try:
        yield relays
    finally:
        for relay in relays:
            if relay.process.poll() is None:
                relay.kill()


def wait_until(
    check: Callable[[], bool],
    *,
    within: float,
    what: str,
    relays: Sequence[RelayProcess] = (),
) -> None:
    """Poll `check` until true, at most `within` seconds; fail naming `what`.

    A relay that exits meanwhile fails it at once, with its log.
    """
    pause = threading.Event()  # never set: each wait is one step of the bound
    for _ in range(int(within / STEP) + 1):
        if check():
            return
        for relay in relays:
            if relay.process.poll() is not None:
                raise AssertionError(
                    f"relay {relay.pid} exited {relay.process.returncode} while "
                    f"waiting for {what}:\n{relay.log_text()[-3000:]}"
                )
        pause.wait(STEP)
    logs = "\n".join(f"--- relay {r.pid}\n{r.log_text()[-2000:]}" for r in relays)
    raise AssertionError(f"no {what} within {within} s\n{logs}")


def reset_tables(engine: sa.Engine) -> None:
    """Empty outbox, idempotency and application tables on `engine`."""
    drop_tables(engine)
    create_outbox_table(engine)
    create_idempotency_table(engine)
    metadata.create_all(engine)


def drop_tables(engine: sa.Engine) -> None:
    metadata.drop_all(engine)
    outbox_table.drop(engine, checkfirst=True)
    idempotency_table.drop(engine, checkfirst=True)


def outbox_states(engine: sa.Engine) -> Mapping[str, int]:
    """How many messages are in each state."""
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(outbox_table.c.state, sa.func.count()).group_by(
                outbox_table.c.state
            )
        )
        return {state: int(count) for state, count in rows}
