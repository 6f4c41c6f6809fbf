"""The outbox relay as a worker process of its own.

Run one relay per process, for as many processes as you need (on PostgreSQL;
one on SQLite)::

    python -m mediator.sqlalchemy.outbox myapp.outbox:relay
    mediator-outbox-relay myapp.outbox:make_relay --log-level DEBUG

TARGET is ``package.module:attribute``: an `OutboxRelay`, or a callable
taking no arguments that returns one (build the mediator and the engine
there). An `AsyncEngine` relay runs `OutboxRelay.run` on asyncio, an `Engine`
one `OutboxRelay.run_sync`. SIGTERM or SIGINT stops it once the deliveries in
flight have recorded their outcome (a second signal exits at once); it logs
to stderr (INFO, or ``--log-level``) and exits 0 after a stop, 1 when the
relay failed, 2 for a bad TARGET.
"""

from mediator.sqlalchemy._outbox.worker import TargetError, load_relay, main

__all__ = ["TargetError", "load_relay", "main"]

from mediator._primitives.public_names import publish as _publish

if __name__ == "__main__":  # python -m: this file runs again, as __main__
    raise SystemExit(main())

_publish(__name__, __all__)
