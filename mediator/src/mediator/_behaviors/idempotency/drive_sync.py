# Generated from drive.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync driver of an idempotent send.

`mediator._behaviors.idempotency.flow` decides a send without I/O: whether its
claim runs the handler, and what settles the claim after; a driver makes the
calls it decides on its path and holds no decisions. This sync
driver is generated from `drive` by ``tools/unasync.py``: edit that one and
run the script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mediator._behaviors.idempotency.flow import note
from mediator._core.behavior import SyncNext
from mediator._core.context import mark_replay

if TYPE_CHECKING:
    from mediator._behaviors.idempotency.flow import HeldClaim, Settling

__all__ = ["drive_send_sync"]


def drive_send_sync(held: HeldClaim, next: SyncNext[Any]) -> Any:
    """Run the rest of the chain under the held claim; settle the claim after."""
    try:
        with held.running():
            result = next()
    except BaseException as error:
        settling = held.failed(error)
        if settling is not None:
            _noting(error, settling)
        raise
    finally:
        mark_replay(False)
    settling = held.returned(result)
    if settling is not None:
        settling.run()
    return result


def _noting(error: BaseException, settling: Settling) -> None:
    """Settle the claim; a failure of its own is noted on `error`, never raised."""
    try:
        settling.run()
    except Exception as failure:
        note(error, failure)
