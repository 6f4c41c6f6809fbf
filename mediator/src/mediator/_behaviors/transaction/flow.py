"""One transactional attempt, written once as a flow of named steps with no I/O.

`attempt` yields each step (a unit-of-work call, the rest of the chain, a
participant's `Step`); the drivers in `drive` and `drive_sync` perform them on
their path, and `outcome_of` turns what the flow returned into the response.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn

from mediator._core.errors import TransientDatabaseError
from mediator._core.scope import (
    UNIT_OF_WORK,
    CommitStep,
    ScopeState,
    Step,
    participants,
)

if TYPE_CHECKING:
    from mediator._behaviors.transaction.behavior import AsyncUnitOfWork, UnitOfWork

__all__ = ["NEXT", "Flow", "attempt", "outcome_of"]

NEXT: Final = "next"  # the step that runs the rest of the chain, as the drivers know it


@dataclass(frozen=True, slots=True)
class _Failed:
    """The attempt's own failure, for the driver to raise as it is.

    Raised from the generator, a `StopIteration` would turn into a
    `RuntimeError`; raised after the driver returns it, every failure stays
    what it was.
    """

    error: BaseException


Flow = Generator[str | Step, Any, Any]


def attempt(
    scope: ScopeState,
    outer: object,
    unit: UnitOfWork | AsyncUnitOfWork,
    request: object,
) -> Flow:
    """One attempt in `unit`, as the steps a driver performs, async or sync.

    It yields the name of each step: ``"begin"``, ``"commit"`` or ``"rollback"``
    (the unit's method to call) or `NEXT` (the rest of the chain); and the
    `Step`s of the scope's participants (`mediator._core.scope`): before the
    outermost commit, theirs to run in the transaction (completing the
    idempotency claims due, so they commit with the handler's writes); after a
    rollback, theirs undoing the attempt's part (releasing the claims of the
    sends that returned inside it). The driver sends back what the step
    returned, or throws in what it raised. It returns the response, or
    `_Failed` with the failure to raise as it is.
    """
    scope[UNIT_OF_WORK] = unit
    marks = {kind: joined.mark() for kind, joined in participants(scope)}
    try:
        yield "begin"
        result = yield NEXT
        due = _due(scope, request, result) if outer is None else []
        for step in due:
            yield step
        yield "commit"
        for step in due:
            step.committed()
    except BaseException as error:
        try:
            yield "rollback"
        except Exception as failure:
            _note_rollback_failure(error, failure)
            if outer is not None:
                _raise_lost(error)
        for kind, joined in participants(scope):
            undone = joined.after_rollback(marks.get(kind, 0))
            if undone is None:
                continue
            try:
                yield undone
            except Exception as failure:
                # The key is free again when its lease ends; the failure that
                # rolled the attempt back is the one to raise.
                error.add_note(
                    "releasing an idempotency key also failed: "
                    f"{type(failure).__qualname__}: {failure}"
                )
        final = unit.translate_error(error) if isinstance(error, Exception) else error
        if final is error:
            return _Failed(error)
        raise final from error
    finally:
        _restore(scope, outer)
    return result


def _due(scope: ScopeState, request: object, response: object) -> list[CommitStep]:
    """The participants' steps to run before the outermost commit, in order."""
    steps = (
        joined.before_commit(request, response) for _, joined in participants(scope)
    )
    return [step for step in steps if step is not None]


def outcome_of(outcome: Any) -> Any:
    """The flow's response, or its own failure raised as it is."""
    if isinstance(outcome, _Failed):
        raise outcome.error
    return outcome


def _restore(scope: ScopeState, outer: object) -> None:
    """Make the unit of work around the attempt the running one again, if any."""
    if outer is None:
        del scope[UNIT_OF_WORK]
    else:
        scope[UNIT_OF_WORK] = outer


def _raise_lost(error: BaseException) -> NoReturn:
    """A nested attempt failed and its savepoint could not be rolled back to.

    The outer transaction may hold the attempt's writes or be unusable: it must
    not go on, so the failure becomes one that only a fresh transaction fixes.
    Cancellation and exits stay as they are.
    """
    if not isinstance(error, Exception):
        raise error
    raise TransientDatabaseError(
        "the transaction was lost, try again (rolling back to a savepoint failed)"
    ) from error


def _note_rollback_failure(error: BaseException, failure: Exception) -> None:
    # The failure that made us roll back is the one the caller needs; a failed
    # rollback is kept beside it, never raised instead of it.
    error.add_note(f"rolling back also failed: {type(failure).__qualname__}: {failure}")
