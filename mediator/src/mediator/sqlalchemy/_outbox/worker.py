"""The relay as a worker process: ``python -m mediator.sqlalchemy.outbox TARGET``.

TARGET names your relay, ``package.module:attribute``: an `OutboxRelay`, or a
callable taking no arguments that returns one. The module is imported as
your own code (the operator chose it), with the directory ``--app-dir`` (the
current one by default) first on ``sys.path``, as uvicorn and celery do.

The relay runs until SIGTERM or SIGINT: the first asks it to stop (the round
in flight finishes, each delivery recording its outcome), a second one ends
the process at once (its leases then run out, and another relay delivers
those messages again). Exit status: 0 after a stop, 1 when the relay failed,
2 for a bad TARGET or bad options.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Final

from sqlalchemy.ext.asyncio import AsyncEngine

from mediator.sqlalchemy._outbox.relay import OutboxRelay

__all__ = ["TargetError", "load_relay", "main"]

PROGRAM: Final = "python -m mediator.sqlalchemy.outbox"
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
EXIT_STOPPED: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_JOIN_STEP: Final = 0.5  # seconds
_log: Final = logging.getLogger("mediator.outbox")


class TargetError(Exception):
    """TARGET does not name an `OutboxRelay` (the command exits 2)."""


def load_relay(target: str) -> OutboxRelay:
    """The relay `target` names: ``package.module:attribute``.

    The attribute may be dotted (``app:relays.orders``); it is an
    `OutboxRelay`, or a callable taking no arguments that returns one.

    Raises:
        TargetError: `target` is malformed, its module is not found, the
            attribute is missing, or it is (or returns) no `OutboxRelay`.
            An error raised inside your module or callable (a failed import
            of something it needs) is raised as it is.
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise TargetError(f"TARGET must be 'package.module:attribute', got {target!r}")
    try:
        found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name != missing and not module_name.startswith(f"{missing}."):
            raise  # the module exists; something it imports does not
        raise TargetError(
            f"module {module_name!r} not found (from TARGET {target!r}); run from "
            "the directory that holds it, or give --app-dir"
        ) from None
    path = module_name
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TargetError(f"{path!r} has no attribute {part!r} (TARGET {target!r})")
        found = getattr(found, part)
        path = f"{path}{'.' if path != module_name else ':'}{part}"
    if isinstance(found, OutboxRelay):
        return found
    if not callable(found):
        raise TargetError(
            f"{target} is a {type(found).__qualname__}, not an OutboxRelay nor a "
            "callable returning one"
        )
    try:
        inspect.signature(found).bind()
    except TypeError:
        raise TargetError(
            f"{target} takes arguments; TARGET names an OutboxRelay or a "
            "callable taking none that returns one"
        ) from None
    except ValueError:  # no signature to read (a builtin): just call it
        pass
    made: object = found()
    if not isinstance(made, OutboxRelay):
        raise TargetError(
            f"{target}() returned a {type(made).__qualname__}, not an OutboxRelay"
        )
    return made


def main(argv: Sequence[str] | None = None) -> int:
    """Run the relay TARGET names until SIGTERM or SIGINT; the exit status.

    Args:
        argv: The arguments after the program's name (``sys.argv[1:]`` when
            None).

    Returns:
        0 after a stop, 1 when the relay failed. A bad TARGET or a bad option
        exits 2 (`SystemExit`), with the reason on stderr.
    """
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description=(
            "Deliver the outbox's messages until SIGTERM or SIGINT (a second "
            "one exits at once). Run one per process; several share a "
            "PostgreSQL outbox, one a SQLite one."
        ),
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help=(
            "package.module:attribute naming an OutboxRelay, or a callable "
            "taking no arguments that returns one"
        ),
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LEVELS,
        help="the level logged to stderr (default: INFO)",
    )
    parser.add_argument(
        "--app-dir",
        default=".",
        help="put first on sys.path before importing TARGET (default: .)",
    )
    options = parser.parse_args(argv)
    logging.basicConfig(
        level=options.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    app_dir = os.path.abspath(options.app_dir)
    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    try:
        relay = load_relay(options.target)
    except TargetError as error:
        parser.error(str(error))  # exits 2
    engine = relay.engine
    database = (
        engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    ).url.render_as_string(hide_password=True)
    _log.info(
        "outbox relay %s started on %s (%s); SIGTERM or SIGINT stops it",
        options.target,
        database,
        "asyncio" if isinstance(engine, AsyncEngine) else "threads",
    )
    try:
        if isinstance(engine, AsyncEngine):
            asyncio.run(_run(relay))
        else:
            _run_sync(relay)
    except Exception:
        _log.exception("outbox relay %s failed", options.target)
        return EXIT_FAILED
    _log.info("outbox relay %s stopped", options.target)
    return EXIT_STOPPED


def _stopper(relay: OutboxRelay) -> Callable[[int], None]:
    """What the first signal does: stop; and let a second one end the process."""

    def stop(signum: int) -> None:
        _log.info(
            "%s: stopping after the deliveries in flight (again to exit at once)",
            signal.Signals(signum).name,
        )
        for each in _SIGNALS:
            signal.signal(each, signal.SIG_DFL)
        relay.stop()

    return stop


async def _run(relay: OutboxRelay) -> None:
    loop = asyncio.get_running_loop()
    stop = _stopper(relay)
    for signum in _SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        await relay.run()
    finally:
        for signum in _SIGNALS:
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(signum)


def _run_sync(relay: OutboxRelay) -> None:
    # The relay runs in a thread of its own: the signal handler runs on this
    # one, so it never interrupts the relay's own use of its locks.
    stop = _stopper(relay)
    failure: list[BaseException] = []

    def target() -> None:
        try:
            relay.run_sync()
        except BaseException as error:
            failure.append(error)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop(signum)

    worker = threading.Thread(target=target, name="mediator-outbox-relay")
    worker.daemon = True  # a second signal ends the process, thread and all
    previous = {signum: signal.signal(signum, on_signal) for signum in _SIGNALS}
    try:
        worker.start()
        # Joined in steps: a signal must reach its handler, on every Python.
        while worker.is_alive():
            worker.join(_JOIN_STEP)
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is on_signal:
                signal.signal(signum, handler)
    if failure:
        raise failure[0]
