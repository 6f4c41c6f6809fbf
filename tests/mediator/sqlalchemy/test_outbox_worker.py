"""``python -m mediator.sqlalchemy.outbox TARGET``: the relay as a worker process.

A bad TARGET exits 2 with the reason; a real worker on a SQLite file delivers
what the test process recorded, and SIGTERM stops it with 0 once the delivery in
flight has recorded its outcome.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from mediator.sqlalchemy import OutboxRelay, outbox_table
from mediator.sqlalchemy.outbox import TargetError, load_relay, main
from tests.support import outbox_relay_app as app
from tests.support.relay_processes import (
    ROOT,
    relays_ended,
    reset_tables,
    start_relay,
    wait_until,
    worker_command,
)

DEADLINE = 60.0  # seconds for what a worker process does


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[tuple[str, sa.Engine]]:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    reset_tables(engine)
    try:
        yield url, engine
    finally:
        engine.dispose()


BAD_TARGETS = {
    "no colon": ("tests.support.outbox_relay_app", "must be 'package.module:"),
    "empty attribute": ("tests.support.outbox_relay_app:", "must be 'package."),
    "no module": ("tests.support.no_such_app:relay", "module 'tests.support.no_"),
    "no attribute": ("tests.support.outbox_relay_app:nope", "has no attribute 'nope'"),
    "not a relay": (
        "tests.support.outbox_relay_app:not_a_relay",
        "is a str, not an OutboxRelay",
    ),
    "callable returning no relay": (
        "tests.support.outbox_relay_app:lease",
        "lease() returned a timedelta, not an OutboxRelay",
    ),
    "callable taking arguments": (
        "tests.support.outbox_relay_app:build_mediator",
        "takes arguments",
    ),
}


@pytest.mark.parametrize(("target", "reason"), BAD_TARGETS.values(), ids=BAD_TARGETS)
def test_a_bad_target_is_refused_with_its_reason(target: str, reason: str) -> None:
    with pytest.raises(TargetError) as refused:
        load_relay(target)
    assert reason in str(refused.value)


def test_main_exits_2_for_a_bad_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tests.support.outbox_relay_app:not_a_relay"])
    assert exited.value.code == 2
    assert "is a str, not an OutboxRelay" in capsys.readouterr().err


def test_an_import_error_inside_the_module_is_not_called_a_missing_target(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken_app.py").write_text("import no_such_dependency\n")
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency"):
        main(["broken_app:relay", "--app-dir", str(tmp_path)])


def test_the_command_exits_2_naming_the_missing_module() -> None:
    done = subprocess.run(
        worker_command("tests.support.no_such_app:relay"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2
    assert "module 'tests.support.no_such_app' not found" in done.stderr


def test_a_target_may_be_the_relay_or_a_callable_making_it(
    sqlite: tuple[str, sa.Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = sqlite
    monkeypatch.setenv("OUTBOX_APP_URL", url)
    made = load_relay("tests.support.outbox_relay_app:build_relay")
    assert isinstance(made, OutboxRelay)
    monkeypatch.setattr(app, "ready_relay", made, raising=False)
    assert load_relay("tests.support.outbox_relay_app:ready_relay") is made


def _record(engine: sa.Engine, *numbers: int) -> None:
    mediator = app.build_mediator(engine)
    mediator.send_sync(app.Record(items=[(n, "k", i) for i, n in enumerate(numbers)]))


def _effects(engine: sa.Engine) -> list[int]:
    with engine.connect() as connection:
        return list(
            connection.execute(sa.select(app.effects.c.n).order_by(app.effects.c.id))
            .scalars()
            .all()
        )


def _states(engine: sa.Engine) -> list[str]:
    with engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(outbox_table.c.state).order_by(outbox_table.c.seq)
            ).scalars()
        )


def test_a_worker_delivers_and_stops_on_sigterm_with_0(
    sqlite: tuple[str, sa.Engine], tmp_path: Path
) -> None:
    url, engine = sqlite
    _record(engine, 1, 2, 3)
    relay = start_relay(url, tmp_path / "relay.log")
    with relays_ended([relay]):
        wait_until(
            lambda: _states(engine) == ["delivered"] * 3,
            within=DEADLINE,
            what="three messages delivered",
            relays=[relay],
        )
        assert relay.terminate() == 0, relay.log_text()
    assert _effects(engine) == [1, 2, 3]
    log = relay.log_text()
    assert "INFO mediator.outbox" in log
    assert "started on sqlite:///" in log
    assert "SIGTERM: stopping after the deliveries in flight" in log
    assert log.rstrip().endswith("build_relay stopped"), log


def test_sigterm_lets_the_delivery_in_flight_record_its_outcome(
    sqlite: tuple[str, sa.Engine], tmp_path: Path
) -> None:
    url, engine = sqlite
    _record(engine, 7)
    held, release = tmp_path / "held", tmp_path / "release"
    relay = start_relay(
        url,
        tmp_path / "relay.log",
        hold_after_commit=str(held),
        release=str(release),
    )
    with relays_ended([relay]):
        wait_until(held.exists, within=DEADLINE, what="the delivery", relays=[relay])
        relay.process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: "SIGTERM: stopping" in relay.log_text(),
            within=DEADLINE,
            what="the stop logged",
            relays=[relay],
        )
        assert _states(engine) == ["pending"]  # held: its outcome not recorded yet
        release.touch()
        assert relay.process.wait(timeout=DEADLINE) == 0, relay.log_text()
    assert _states(engine) == ["delivered"]
    assert _effects(engine) == [7]
