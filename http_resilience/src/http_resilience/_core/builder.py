"""The builder: steps (strategy options) wrapped around a send, first outermost.

Polly's ``AddStrategy`` shape. Each step's options build their own strategy,
for the async or the sync chain, from a small `BuildContext` (the clock, the
telemetry, the random source, the state one transport's strategies share, and
the kinds of step built by someone else) and the step's `Placement` in the
pipeline. The builder knows no strategy by
name: what it needs to know about a step, the step declares (`StepOptions`),
and what most steps declare alike they inherit
(`http_resilience._core.step_defaults`).

The rules it applies to any pipeline, the standard one included:

- A deadline (a timeout) with a step inside it that repeats what is inside
  that (a retry, hedging) bounds the whole sequence: a total timeout; any
  other bounds one attempt.
- Only the deadlines that must cut do: a deadline with another deadline inside
  it, and no step between them that waits outside an attempt (a limiter's
  queue, hedging), arms no timer of its own. The inner one cuts at the earlier
  of both deadlines, and a retry never waits past a deadline.
- The innermost deadline is the one that may own the transport's time (set
  each attempt's httpx timeouts from the time it has left).
- Steps of one build share per-transport state through the context
  (`BuildContext.shared`): the timeouts' one timer for all deadlines.
- A context may build some kinds of step itself (`BuildContext.overrides`, a
  table from a step's options class to a `StepBuilder`), registered by
  whoever makes the context. The builder asks the table first; a kind not in
  it, or a `StepBuilder` that declines (None), is built by the step's own
  options.
- A step whose options cannot build a sync strategy makes the pipeline
  async-only: a sync chain refuses it (`async_only`).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    ClassVar,
    Generic,
    Protocol,
    TypeVar,
    cast,
    runtime_checkable,
)

import httpx

from http_resilience._core.call import AsyncHandler, SyncHandler
from http_resilience._core.clock import Clock
from http_resilience._core.telemetry import Telemetry

__all__ = [
    "BuildContext",
    "BuiltPipeline",
    "Placement",
    "StepBuilder",
    "StepOptions",
    "SyncStepOptions",
    "async_only",
    "build_async",
    "build_sync",
    "placements",
]

T = TypeVar("T")
H = TypeVar("H", AsyncHandler, SyncHandler)
S = TypeVar("S")
Step = TypeVar("Step", bound="StepOptions")


@dataclass(slots=True)
class BuildContext:
    """What the steps of one transport's pipeline are built from.

    Attributes:
        clock: The strategies' time.
        telemetry: Where the strategies report.
        random: A float in [0, 1) per call (the retry's jitter).
        overrides: Kinds of step built by a `StepBuilder` rather than by their
            own options, by options class (a subclass is found through its
            bases). Empty: every step builds itself.
    """

    clock: Clock
    telemetry: Telemetry
    random: Callable[[], float] = _random.random
    overrides: Mapping[type[StepOptions], StepBuilder[Any, Any]] = field(
        default_factory=dict["type[StepOptions]", "StepBuilder[Any, Any]"]
    )
    _once: dict[object, object] = field(default_factory=dict[object, object])

    def once(self, make: Callable[[], T]) -> T:
        """The one object `make` makes for this build: every step gets the same."""
        found = self._once.get(make)
        if found is None:
            found = self._once[make] = make()
        return cast("T", found)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a step sits in its pipeline, as the builder's rules read it.

    Attributes:
        repeated: A step inside this one repeats what is inside it: a deadline
            here bounds the whole sequence (a total timeout).
        cut: For a deadline: it must cut what runs inside it itself (no inner
            deadline cuts for it).
        owns_time: For a deadline: it is the innermost one, the one that may
            set each attempt's httpx timeouts.
    """

    repeated: bool
    cut: bool
    owns_time: bool


class StepOptions(Protocol):
    """A step's options, as the builder sees them."""

    @property
    def label(self) -> str:
        """The step in a pipeline's repr: ``"retry"``, ``"timeout 1 s"``."""
        ...

    is_deadline: ClassVar[bool]
    """Whether the step is a deadline (a timeout) the builder places."""
    repeats: ClassVar[bool]
    """Whether the step runs what is inside it more than once."""

    @property
    def waits_outside_attempts(self) -> bool:
        """Whether time may pass in the step while no attempt inside it runs.

        The retry's waits do not count: they never pass a deadline.
        """
        ...

    def will_repeat(self, request: httpx.Request) -> bool:
        """For a step that repeats: whether it may send `request` more than once."""
        ...

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncHandler:
        """The step's strategy for an async chain, around `next`."""
        ...


@runtime_checkable
class SyncStepOptions(StepOptions, Protocol):
    """A step that has a sync strategy as well."""

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncHandler:
        """The step's strategy for a sync chain, around `next`."""
        ...


@dataclass(frozen=True, slots=True)
class StepBuilder(Generic[Step, S]):
    """Builds the steps of one kind in a context's place (`BuildContext.overrides`).

    Attributes:
        kind: The options class whose steps it builds (a subclass's too).
        strategy: The strategy for a step of `kind`; None leaves the step to
            its own options (a second step of the same kind, say).
        make_async: The async driver of that strategy, around what it wraps.
        make_sync: The sync driver of that strategy.
    """

    kind: type[Step]
    strategy: Callable[[Step, BuildContext], S | None]
    make_async: Callable[[AsyncHandler, S], AsyncHandler]
    make_sync: Callable[[SyncHandler, S], SyncHandler]

    def strategy_for(self, step: StepOptions, context: BuildContext) -> S | None:
        """`step`'s strategy, or None: another kind, or declined."""
        if not isinstance(step, self.kind):
            return None
        return self.strategy(step, context)


@dataclass(frozen=True, slots=True)
class BuiltPipeline(Generic[H]):
    """One transport's chain, built from its steps.

    Attributes:
        handler: The outermost handler.
        will_retry: Whether one of the steps may send a request more than once.
        strategies: The strategies built, outermost first.
    """

    handler: H
    will_retry: Callable[[httpx.Request], bool]
    strategies: tuple[object, ...]

    def find(self, kind: type[T]) -> T | None:
        """The outermost strategy of type `kind`, if the pipeline has one."""
        for strategy in self.strategies:
            if isinstance(strategy, kind):
                return strategy
        return None


def async_only(steps: Sequence[StepOptions]) -> bool:
    """Whether a step of `steps` has no sync strategy (hedging)."""
    return not all(isinstance(step, SyncStepOptions) for step in steps)


def placements(steps: Sequence[StepOptions]) -> list[Placement]:
    """Each step's `Placement`, outermost first (see the module's rules)."""
    places: list[Placement] = []
    repeated = False
    inner_deadline = False  # one inside, and no wait outside attempts since
    innermost = True
    for step in reversed(steps):
        if step.is_deadline:
            places.append(Placement(repeated, not inner_deadline, innermost))
            inner_deadline, innermost = True, False
            continue
        places.append(Placement(repeated, False, False))
        if step.waits_outside_attempts:
            inner_deadline = False
        if step.repeats:
            repeated = True
    places.reverse()
    return places


def build_async(
    steps: Sequence[StepOptions], send: AsyncHandler, context: BuildContext
) -> BuiltPipeline[AsyncHandler]:
    """The async chain of `steps` around `send`."""
    return _build(
        steps,
        send,
        context,
        lambda step: step.build_async,
        lambda override: override.make_async,
    )


def build_sync(
    steps: Sequence[StepOptions], send: SyncHandler, context: BuildContext
) -> BuiltPipeline[SyncHandler]:
    """The sync chain of `steps` around `send`.

    Raises:
        TypeError: A step has no sync strategy (check `async_only` first, to
            say why in the caller's words).
    """
    return _build(
        steps,
        send,
        context,
        _own_sync,
        lambda override: override.make_sync,
    )


def _own_sync(
    step: StepOptions,
) -> Callable[[SyncHandler, BuildContext, Placement], SyncHandler]:
    if not isinstance(step, SyncStepOptions):
        raise TypeError(f"{step.label} has no sync strategy: it needs async")
    return step.build_sync


def _override(context: BuildContext, step: StepOptions) -> StepBuilder[Any, Any] | None:
    """The `StepBuilder` registered for `step`'s class or the nearest base."""
    overrides = context.overrides
    if overrides:
        for kind in type(step).__mro__:
            found = overrides.get(kind)
            if found is not None:
                return found
    return None


def _build(
    steps: Sequence[StepOptions],
    send: H,
    context: BuildContext,
    own: Callable[[StepOptions], Callable[[H, BuildContext, Placement], H]],
    drive: Callable[[StepBuilder[Any, Any]], Callable[[H, Any], H]],
) -> BuiltPipeline[H]:
    """The chain of `steps` around `send`, innermost built first.

    Each step is built by the `StepBuilder` registered for its kind (its
    strategy, in its `drive`r), unless there is none or it declines; then by
    its `own` build (asked first, so that a step that cannot build in this
    colour is refused either way).
    """
    handler = send
    built: list[object] = []
    for step, place in reversed([*zip(steps, placements(steps), strict=True)]):
        build = own(step)
        override = _override(context, step)
        strategy = None if override is None else override.strategy_for(step, context)
        if override is None or strategy is None:
            handler = build(handler, context, place)
        else:
            handler = drive(override)(handler, strategy)
        built.append(handler)
    built.reverse()
    checks = [step.will_repeat for step in steps if step.repeats]
    return BuiltPipeline(handler, _any_of(checks), tuple(built))


def _never(request: httpx.Request) -> bool:
    return False


def _any_of(
    checks: Sequence[Callable[[httpx.Request], bool]],
) -> Callable[[httpx.Request], bool]:
    if not checks:
        return _never
    if len(checks) == 1:
        return checks[0]

    def any_of(request: httpx.Request) -> bool:
        return any(check(request) for check in checks)

    return any_of
