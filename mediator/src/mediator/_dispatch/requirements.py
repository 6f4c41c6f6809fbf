"""What a marked request needs from the chain: checked when the mediator is built.

A marker (``@transactional``, ``@retryable``, ...) only says what should happen
to a request; a behavior does it. Without that behavior in the request's chain
the marker would do nothing, silently. So each marker declares the behavior it
needs, and `NeedsCheck` refuses, at build, a request type whose chain has
none that serves it.

The mediator's own markers are known here. Another package's marker (this one
imports none) declares its need by convention: it appends an object with the
attributes of `BehaviorNeed` to the class attribute ``__mediator_requires__``
(a tuple, inherited like the marker). `mediator_resilience`'s ``@retryable``
does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from injector import get_bindings  # pyright: ignore[reportUnknownVariableType]

from mediator._behaviors.authorization import AuthorizationBehavior, requirements_of
from mediator._behaviors.fallback.behavior import FallbackBehavior
from mediator._behaviors.idempotency.behavior import IdempotencyBehavior
from mediator._behaviors.idempotency.marker import is_idempotent
from mediator._behaviors.transaction.behavior import TransactionBehavior
from mediator._behaviors.transaction.marker import is_transactional
from mediator._core.errors import ConfigurationError
from mediator._core.markers import is_fallback
from mediator._core.stage import Stage
from mediator._dispatch.outbox import Outbox
from mediator._dispatch.routes import BehaviorInfo

__all__ = ["REQUIRES", "BehaviorNeed", "NeedsCheck", "check_outbox_use"]

REQUIRES: Final = "__mediator_requires__"
"""The class attribute where a marker of another package declares its needs."""


@dataclass(frozen=True, slots=True)
class BehaviorNeed:
    """A marker's need: a behavior of `stage` that applies to the marked type.

    Attributes:
        marker: How the user wrote the marker, such as ``"@retryable"``.
        stage: The stage of the behavior that serves it; any behavior of
            that stage whose ``applies_to`` accepts the type does.
        install: What to do when none does, as a sentence's end: "add
            ResilienceMediatorModule() (from mediator_resilience) to the
            Injector's modules".
    """

    marker: str
    stage: Stage
    install: str


_DEFAULTS_HINT: Final = (
    "call .use_defaults() in the MediatorModule callback, or .add_behavior({})"
)
_TRANSACTIONAL: Final = BehaviorNeed(
    "@transactional", Stage.TRANSACTION, _DEFAULTS_HINT.format("TransactionBehavior")
)
_IDEMPOTENT: Final = BehaviorNeed(
    "@idempotent", Stage.IDEMPOTENCY, _DEFAULTS_HINT.format("IdempotencyBehavior")
)
_FALLBACK: Final = BehaviorNeed(
    "@fallback", Stage.FALLBACK, _DEFAULTS_HINT.format("FallbackBehavior")
)
_AUTHORIZE: Final = BehaviorNeed(
    "@authorize", Stage.AUTHORIZATION, _DEFAULTS_HINT.format("AuthorizationBehavior")
)


_OWN: Final[tuple[tuple[type[Any], Callable[[type[Any]], bool], BehaviorNeed], ...]] = (
    (AuthorizationBehavior, lambda kind: bool(requirements_of(kind)), _AUTHORIZE),
    (FallbackBehavior, is_fallback, _FALLBACK),
    (IdempotencyBehavior, is_idempotent, _IDEMPOTENT),
    (TransactionBehavior, is_transactional, _TRANSACTIONAL),
)


class NeedsCheck:
    """`check` for each request type of one chain; built once per mediator.

    A built-in behavior in the chain serves its marker on every type it
    applies to (its ``applies_to`` answers the marker, or fails the build),
    so only the markers whose behavior is absent are asked of each type:
    under `use_defaults()`, none. Another package's needs are read from the
    type, one attribute lookup.
    """

    __slots__ = ("_own",)

    def __init__(self, chain: Iterable[BehaviorInfo]) -> None:
        present: list[type[Any]] = [type(b.instance) for b in chain]
        self._own = tuple(
            (marked, need)
            for behavior, marked, need in _OWN
            if not any(issubclass(kind, behavior) for kind in present)
        )

    def check(
        self, request_type: type[Any], applicable: Sequence[BehaviorInfo]
    ) -> None:
        """Refuse `request_type` when a marker on it has no behavior to serve it.

        `applicable` is the request type's chain: the behaviors that apply to it.

        Raises:
            ConfigurationError: Naming the request, the marker, the behavior's
                stage and what to install; or ``__mediator_requires__`` holds
                something that is not a need (a marker of another package
                written wrong).
        """
        needs = [need for marked, need in self._own if marked(request_type)]
        declared: object = getattr(request_type, REQUIRES, ())
        if declared:
            entries = (
                cast("tuple[object, ...]", declared)
                if isinstance(declared, tuple)
                else (declared,)
            )
            needs.extend(_as_need(request_type, entry) for entry in entries)
        if not needs:
            return
        stages = set(_stages(applicable))
        for need in needs:
            if need.stage not in stages:
                raise ConfigurationError(
                    f"{_name(request_type)} is marked {need.marker}, but no "
                    f"behavior of stage {need.stage.name or need.stage.value} in "
                    "the mediator's chain applies to it, so the marker would do "
                    f"nothing: {need.install}"
                )


def check_outbox_use(handler: type[Any], request_type: type[Any]) -> None:
    """Refuse a handler that takes the `Outbox` for a request that is not transactional.

    The outbox writes in the running transaction, so such a handler would
    fail at its first ``send``; it fails the build instead. A notification
    handler is not checked: it may run inside a transactional send.

    Raises:
        ConfigurationError: Naming the handler, the request and the fix.
    """
    init: object = getattr(handler, "__init__", None)
    try:
        wanted = get_bindings(cast(Callable[..., Any], init)).values()
    except (TypeError, NameError):  # a signature injector cannot read: its own error
        return
    if Outbox in wanted and not is_transactional(request_type):
        raise ConfigurationError(
            f"handler {_name(handler)} takes the Outbox, but {_name(request_type)} "
            "is not @transactional: the outbox records its messages in the "
            "request's transaction, so mark the request @transactional"
        )


def _as_need(request_type: type[Any], entry: object) -> BehaviorNeed:
    if isinstance(entry, BehaviorNeed):
        return entry
    marker: object = getattr(entry, "marker", None)
    stage: object = getattr(entry, "stage", None)
    install: object = getattr(entry, "install", None)
    if (
        not isinstance(marker, str)
        or not isinstance(stage, Stage)
        or not isinstance(install, str)
    ):
        raise ConfigurationError(
            f"{_name(request_type)}: {REQUIRES} holds {entry!r}, which is not a "
            "need (an object with marker: str, stage: Stage and install: str); "
            "the decorator that put it there is at fault"
        )
    return BehaviorNeed(marker, stage, install)


def _stages(applicable: Iterable[BehaviorInfo]) -> Iterable[Stage]:
    for behavior in applicable:
        stage: object = getattr(behavior.instance, "stage", None)
        if isinstance(stage, Stage):
            yield stage


def _name(kind: type[Any]) -> str:
    return f"{kind.__qualname__} (module {kind.__module__})"
