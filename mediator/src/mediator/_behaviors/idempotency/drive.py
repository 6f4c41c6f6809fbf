"""The async driver of an idempotent send.

`mediator._behaviors.idempotency.flow` decides a send without I/O: whether its
claim runs the handler, and what settles the claim after; a driver makes the
calls it decides on its path and holds no decisions. The sync
driver, `drive_sync`, is generated from this module by ``tools/unasync.py``:
edit this one and run the script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mediator._behaviors.idempotency.flow import note
from mediator._core.behavior import Next
from mediator._core.context import mark_replay

if TYPE_CHECKING:
    from mediator._behaviors.idempotency.flow import HeldClaim, Settling

__all__ = ["drive_send"]


async def drive_send(held: HeldClaim, next: Next[Any]) -> Any:
    """Run the rest of the chain under the held claim; settle the claim after."""
    try:
        with held.running():
            result = await next()
    except BaseException as error:
        settling = held.failed(error)
        if settling is not None:
            await _noting(error, settling)
        raise
    finally:
        mark_replay(False)
    settling = held.returned(result)
    if settling is not None:
        await settling.arun()
    return result


async def _noting(error: BaseException, settling: Settling) -> None:
    """Settle the claim; a failure of its own is noted on `error`, never raised."""
    try:
        await settling.arun()
    except Exception as failure:
        note(error, failure)
