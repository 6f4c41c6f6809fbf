# Generated from drive.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync driver of a transactional attempt.

`mediator._behaviors.transaction.flow` writes an attempt once, as a flow
of named steps that does no I/O; a driver performs the steps on its path and
holds no decisions. This sync driver is generated from `drive` by
``tools/unasync.py``: edit that one and run the script.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from mediator._core.behavior import SyncNext

if TYPE_CHECKING:
    from mediator._behaviors.transaction.behavior import UnitOfWork
    from mediator._core.scope import Step

__all__ = ["drive_attempt_sync"]


def drive_attempt_sync(
    flow: Generator[str | Step, Any, Any], unit: UnitOfWork, next: SyncNext[Any]
) -> Any:
    """Perform the flow's steps on the sync path; return what the flow returns.

    A step is ``"next"`` (the rest of the chain), the name of a method of
    `unit`, or a `Step` (completing or releasing idempotency claims), run with
    its ``run``. What a step returns is sent back into the flow; what it
    raises is thrown in.
    """
    value: Any = None
    failure: BaseException | None = None
    while True:
        try:
            step = flow.send(value) if failure is None else flow.throw(failure)
        except StopIteration as done:
            return done.value
        failure = None
        try:
            if isinstance(step, str):
                value = next() if step == "next" else getattr(unit, step)()
            else:
                value = step.run()
        except BaseException as error:
            failure = error
