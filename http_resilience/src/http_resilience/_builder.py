"""`ResiliencePipeline`: strategies in an order of your own, first added outermost."""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from http_resilience._clock import Clock
from http_resilience._hedging import HedgingStrategy, is_hedged
from http_resilience._pipeline import DeadlineKind, Handler
from http_resilience._retry import RetryDecision, RetryStrategy
from http_resilience._strategies import BreakerStrategy, LimiterStrategy
from http_resilience._strategy_options import (
    BreakerOptions,
    HedgingOptions,
    LimiterOptions,
    RetryOptions,
    TimeoutOptions,
)
from http_resilience._telemetry import Telemetry
from http_resilience._timeout import TimeoutStrategy

__all__ = ["BuiltPipeline", "ResiliencePipeline"]

Step = TimeoutOptions | RetryOptions | BreakerOptions | LimiterOptions | HedgingOptions
Options = TypeVar("Options", bound=BaseModel)


def _options(
    kind: type[Options], options: Options | None, fields: dict[str, Any], add: str
) -> Options:
    """`options`, or the options `fields` describe: one or the other."""
    if options is None:
        return kind.model_validate(fields)
    if fields:
        raise TypeError(
            f"{add}: give a {kind.__name__} or its fields as keywords, not both"
        )
    if not isinstance(options, kind):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"{add}: options must be {kind.__name__}, got {type(options).__qualname__}"
        )
    return options


@dataclass(frozen=True, slots=True)
class BuiltPipeline:
    """One transport's chain, built from a `ResiliencePipeline`."""

    handler: Handler
    will_retry: Callable[[httpx.Request], bool]


class ResiliencePipeline:
    """The strategies of a custom pipeline, in the order they were added.

    The first strategy added is the outermost: ``add_timeout("1s")`` then
    ``add_retry()`` then ``add_timeout("300ms")`` gives a 1 s limit on the
    whole call (attempts and waits together) and a 300 ms limit on each
    attempt. Give it to `AsyncResilientTransport` or `create_async_client` (or
    their sync twins) as ``pipeline=``, instead of the standard pipeline's
    options.

    A pipeline is immutable: each ``add_...`` returns a new one, so one
    pipeline can start several others. It holds no state; each transport
    builds strategies of its own from it (its own breakers, its own limiter).

    Each ``add_...`` takes the strategy's options object, or its fields as
    keywords, and validates them there and then.

    A timeout with a retry or hedging inside it bounds the whole sequence and
    raises `TotalTimeoutError`; one with neither inside bounds each attempt and
    raises `AttemptTimeoutError`, which counts as a failed attempt. The
    innermost timeout sets each attempt's httpx timeouts from the time it has
    left (the pipeline owns time); with no timeout, the client's httpx
    timeouts apply.

    Hedging needs the async transport: the sync transports refuse a pipeline
    with hedging (a blocking attempt cannot be cancelled, so a hedge's loser
    would run on to its end).

    Example:
        >>> pipeline = (
        ...     ResiliencePipeline()
        ...     .add_timeout("1s")
        ...     .add_retry(max_retry_attempts=2, base_delay="100ms")
        ...     .add_timeout("300ms")
        ... )
        >>> pipeline
        ResiliencePipeline(timeout 1 s, retry, timeout 0.3 s)
    """

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: tuple[Step, ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """The strategies' options, outermost first."""
        return self._steps

    @property
    def hedges(self) -> bool:
        """Whether the pipeline has a hedging strategy."""
        return any(isinstance(step, HedgingOptions) for step in self._steps)

    def _with(self, step: Step) -> ResiliencePipeline:
        pipeline = ResiliencePipeline()
        pipeline._steps = (*self._steps, step)
        return pipeline

    def add_timeout(self, timeout: Any) -> ResiliencePipeline:
        """Add a timeout: what is added after it must end within `timeout`.

        Args:
            timeout: A `timedelta`, seconds, ``"300ms"``, ``"2s"`` or ISO 8601;
                more than zero.

        Raises:
            pydantic.ValidationError: `timeout` is not a positive duration.
        """
        return self._with(TimeoutOptions(timeout=timeout))

    def add_retry(
        self, options: RetryOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a retry: what is added after it is run again after a failure.

        Args:
            options: The retry's options; default `RetryOptions()`.
            **fields: `RetryOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
        """
        return self._with(_options(RetryOptions, options, fields, "add_retry"))

    def add_breaker(
        self, options: BreakerOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a circuit breaker around what is added after it (per host by default).

        Args:
            options: The breaker's options; default `BreakerOptions()`.
            **fields: `BreakerOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
        """
        return self._with(_options(BreakerOptions, options, fields, "add_breaker"))

    def add_limiter(
        self, options: LimiterOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a concurrency limiter around what is added after it.

        Args:
            options: The limiter's options; default `LimiterOptions()`.
            **fields: `LimiterOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
        """
        return self._with(_options(LimiterOptions, options, fields, "add_limiter"))

    def add_hedging(
        self, options: HedgingOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add hedging: a slow safe request gets more copies of what follows.

        Args:
            options: The hedging's options; default `HedgingOptions()`.
            **fields: `HedgingOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
        """
        return self._with(_options(HedgingOptions, options, fields, "add_hedging"))

    def build(
        self,
        send: Handler,
        *,
        clock: Clock,
        telemetry: Telemetry,
        random: Callable[[], float] | None = None,
    ) -> BuiltPipeline:
        """Build the strategies around `send`, innermost first.

        Args:
            send: The innermost handler: one attempt.
            clock: The strategies' time.
            telemetry: Where the strategies report.
            random: The retry's jitter source; default `random.random`.
        """
        steps = self._steps
        last_timeout = max(
            (i for i, step in enumerate(steps) if isinstance(step, TimeoutOptions)),
            default=-1,
        )
        draw = random or _random.random
        checks: list[Callable[[httpx.Request], bool]] = []
        handler = send
        for index in reversed(range(len(steps))):
            step = steps[index]
            if isinstance(step, TimeoutOptions):
                repeats = any(
                    isinstance(inner, RetryOptions | HedgingOptions)
                    for inner in steps[index + 1 :]
                )
                kind: DeadlineKind = "total" if repeats else "attempt"
                # Every timeout of a custom pipeline arms its own cut: something
                # between two of them (a limiter's queue) may wait outside any
                # attempt. The standard pipeline knows better, and saves one.
                handler = TimeoutStrategy(
                    handler,
                    seconds=step.timeout.total_seconds(),
                    kind=kind,
                    clock=clock,
                    telemetry=telemetry,
                    cut=True,
                    own_time=index == last_timeout,
                )
            elif isinstance(step, RetryOptions):
                decision = RetryDecision(
                    max_retry_attempts=step.max_retry_attempts,
                    base_delay=step.base_delay.total_seconds(),
                    retry_unsafe_methods=step.retry_unsafe_methods,
                    random=draw,
                )
                checks.append(decision.will_retry)
                handler = RetryStrategy(
                    handler, decision=decision, clock=clock, telemetry=telemetry
                )
            elif isinstance(step, BreakerOptions):
                handler = BreakerStrategy(
                    handler, options=step, clock=clock, telemetry=telemetry
                )
            elif isinstance(step, LimiterOptions):
                handler = LimiterStrategy(
                    handler,
                    permits=step.concurrency_limit,
                    queue_limit=step.queue_limit,
                    telemetry=telemetry,
                )
            else:
                checks.append(is_hedged)
                handler = HedgingStrategy(
                    handler,
                    delay=step.delay.total_seconds(),
                    max_hedged_attempts=step.max_hedged_attempts,
                    clock=clock,
                    telemetry=telemetry,
                )

        def will_retry(request: httpx.Request) -> bool:
            return any(check(request) for check in checks)

        return BuiltPipeline(handler, will_retry)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResiliencePipeline):
            return NotImplemented
        return self._steps == other._steps

    def __hash__(self) -> int:
        return hash(self._steps)

    def __repr__(self) -> str:
        names: list[str] = []
        for step in self._steps:
            if isinstance(step, TimeoutOptions):
                names.append(f"timeout {step.timeout.total_seconds():g} s")
            else:
                names.append(type(step).__name__.removesuffix("Options").lower())
        return f"ResiliencePipeline({', '.join(names)})"
