"""The outbox relay run inside the service's process: a task, or a thread.

`OutboxRelay` delivers what `PlaceOrder` recorded in the outbox (a
`ReserveStock` per order) after the order's transaction commits. On SQLite,
the embedded default, one relay runs beside the web app, in its process:

- an ASGI app (this sample) runs `RelayTask`: ``relay.run()`` as an asyncio
  task, started in the lifespan and stopped when the app stops;
- a WSGI app (Flask, Django under gunicorn) has no event loop of its own: it
  runs `RelayThread`, ``relay.run_sync()`` in a daemon thread that the worker
  starts once it has forked (gunicorn's ``post_worker_init`` hook, say) and
  stops at its exit (``worker_exit``), with a mediator whose handlers are
  ``def`` and an `Engine`. Run it in one worker only on SQLite (one relay per
  database); on PostgreSQL each worker may run one, their claims never meet.

Both stop the same way: `OutboxRelay.stop` (the run returns after the round in
flight), then a bounded wait for it; a round that overruns the bound is
cancelled (the task) or left to its daemon thread, and its messages are
delivered again once their lease runs out: at least once, never lost.

Example, a WSGI worker's hooks (gunicorn's ``gunicorn.conf.py``)::

    def post_worker_init(worker):
        relay = OutboxRelay(mediator, engine, base_delay=timedelta(seconds=1))
        worker.relay = RelayThread(relay)
        worker.relay.start()

    def worker_exit(server, worker):
        worker.relay.stop()
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Final

from mediator.sqlalchemy import OutboxRelay

__all__ = ["STOP_WITHIN", "RelayTask", "RelayThread"]

STOP_WITHIN: Final = 5.0
"""Seconds a stop waits for the round in flight before giving up on it."""

_log: Final = logging.getLogger("webapi.relay")


class RelayTask:
    """``relay.run()`` as an asyncio task of the running loop (an ASGI lifespan).

    Example:
        >>> async def lifespan(app):  # doctest: +SKIP
        ...     running = RelayTask(relay)
        ...     running.start()
        ...     try:
        ...         yield
        ...     finally:
        ...         await running.stop()
    """

    def __init__(self, relay: OutboxRelay) -> None:
        self.relay = relay
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether the task runs now: started, and neither stopped nor failed."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the task on the running loop.

        Raises:
            RuntimeError: It runs already, or there is no running loop.
        """
        if self.running:
            raise RuntimeError("the outbox relay task runs already")
        self._task = asyncio.create_task(self.relay.run(), name="outbox-relay")

    async def stop(self, within: float = STOP_WITHIN) -> None:
        """Stop the relay, waiting at most `within` seconds, then cancelling it.

        A relay that failed (its database gone, say) is logged here, with
        its error, rather than raised into the app's shutdown.
        """
        task = self._task
        if task is None:
            return
        self.relay.stop()
        try:
            # wait_for cancels the task when the bound passes.
            await asyncio.wait_for(task, within)
        except TimeoutError:
            _log.warning(
                "the outbox relay did not stop within %g s and was cancelled; "
                "what it held is delivered again after its lease",
                within,
            )
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the shutdown itself was cancelled
        except Exception:
            _log.exception("the outbox relay had failed")
        finally:
            self._task = None


class RelayThread:
    """``relay.run_sync()`` in a daemon thread (a WSGI worker's relay).

    The relay needs an `Engine` (not an `AsyncEngine`) and a mediator whose
    handlers run without an event loop.

    Example:
        >>> running = RelayThread(relay)  # doctest: +SKIP
        >>> running.start()  # doctest: +SKIP
        >>> running.stop()  # at the worker's exit  # doctest: +SKIP
    """

    def __init__(self, relay: OutboxRelay, *, name: str = "outbox-relay") -> None:
        self.relay = relay
        self._name = name
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the thread runs now."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (a daemon: it never keeps the process alive).

        Raises:
            RuntimeError: It runs already.
        """
        if self.running:
            raise RuntimeError("the outbox relay thread runs already")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, within: float = STOP_WITHIN) -> bool:
        """Stop the relay, waiting at most `within` seconds; whether it stopped.

        A thread cannot be cancelled: one still in a round after `within` is
        left to end with the process (a daemon), and the messages it holds are
        delivered again after their lease.
        """
        thread = self._thread
        if thread is None:
            return True
        self.relay.stop()
        thread.join(within)
        if thread.is_alive():
            _log.warning(
                "the outbox relay thread did not stop within %g s; what it "
                "held is delivered again after its lease",
                within,
            )
            return False
        self._thread = None
        return True

    def _run(self) -> None:
        try:
            self.relay.run_sync()
        except Exception:
            # A thread's exception goes nowhere; the log is where it shows.
            _log.exception("the outbox relay thread failed")
