"""`ResiliencePipeline`: strategies in an order of your own, first added outermost.

The public, fluent face of the builder (`http_resilience._core.builder`): each
``add_...`` appends a strategy's options, and a transport builds its own chain
from them, with the builder's rules (one timer for every deadline, no cut where
an inner timeout cuts for it, the innermost timeout owning the transport's
time). The standard pipeline is the same builder's preset (`standard_steps`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from http_resilience._core.builder import StepOptions, async_only
from http_resilience._primitives.durations import DurationInput
from http_resilience._strategies.adaptive.options import AdaptiveLimiterOptions
from http_resilience._strategies.breaker.options import BreakerOptions
from http_resilience._strategies.budget.options import RetryBudgetOptions
from http_resilience._strategies.concurrency.options import ConcurrencyLimiterOptions
from http_resilience._strategies.fallback.options import (
    AsyncFallbackStep,
    FallbackStep,
    fallback_step,
)
from http_resilience._strategies.fallback.strategy import (
    AsyncFallbackFunction,
    FallbackFunction,
)
from http_resilience._strategies.hedging.options import HedgingOptions
from http_resilience._strategies.rate_limit.options import RateLimiterOptions
from http_resilience._strategies.retry.options import RetryOptions
from http_resilience._strategies.stale_cache.options import StaleCacheOptions
from http_resilience._strategies.timeout.options import TimeoutOptions

__all__ = ["ResiliencePipeline", "awaits_fallback"]

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


def awaits_fallback(pipeline: ResiliencePipeline) -> bool:
    """Whether `pipeline` is async-only for an async fallback alone (no hedging)."""
    needs_async = [step for step in pipeline.steps if async_only((step,))]
    return bool(needs_async) and all(
        isinstance(step, AsyncFallbackStep) for step in needs_async
    )


def _degrading_rank(step: StepOptions) -> int:
    """0 for a fallback, 1 for the stale cache, 2 for any other step."""
    if isinstance(step, FallbackStep | AsyncFallbackStep):
        return 0
    return 1 if isinstance(step, StaleCacheOptions) else 2


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
    would run on to its end), and with an async fallback.

    The two steps that degrade on purpose, `add_fallback` and
    `add_stale_cache`, go outside every other step wherever they are added,
    so they see only the call's end (after the retries, the breaker, the
    limiters): the fallbacks outermost, in the order added, then the stale
    cache.

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
        self._steps: tuple[StepOptions, ...] = ()

    @property
    def steps(self) -> tuple[StepOptions, ...]:
        """The strategies' options, outermost first."""
        return self._steps

    @property
    def async_only(self) -> bool:
        """Whether a strategy has no sync twin (hedging, an async fallback).

        No sync client runs such a pipeline.
        """
        return async_only(self._steps)

    def _with(self, step: StepOptions) -> ResiliencePipeline:
        pipeline = ResiliencePipeline()
        pipeline._steps = (*self._steps, step)
        return pipeline

    def _degrading(self, step: StepOptions, rank: int) -> ResiliencePipeline:
        """This pipeline with `step` among the degrading steps at its outer end.

        Rank 0 (a fallback) goes after the fallbacks already there; rank 1
        (the stale cache) after them and before every other step.
        """
        steps = self._steps
        at = 0
        while at < len(steps) and _degrading_rank(steps[at]) <= rank:
            at += 1
        pipeline = ResiliencePipeline()
        pipeline._steps = (*steps[:at], step, *steps[at:])
        return pipeline

    def add_fallback(
        self, fn: FallbackFunction | AsyncFallbackFunction, /
    ) -> ResiliencePipeline:
        """Add a fallback: `fn` answers when the call has given up.

        ``fn(request, failure)`` is called only when the call ends in a
        failure that may degrade (a failure status: 408, 429, the 5xx but
        501 and 505; a transport failure or a timeout; an open breaker, a
        limiter or a quota that refused), never for a mistake (a bug, a
        request the client could not send, a cancellation). `failure` is the
        exception the call would raise, or the failing response it would
        return. `fn` returns the response that stands in for it, or None to
        let the failure through. Its response is marked degraded
        (`degradation(response)`: source ``"fallback"``, the failure as its
        reason), and the call's `RequestEvent` says so. A `fn` that raises
        does not replace the failure: an exception is raised as it was,
        with the fallback's failure on it (`suppressed_failure`); a failing
        response is returned as it was.

        The fallback goes outside every step but the fallbacks added before
        it, wherever it is added: it sees only what the whole call ended
        with, after its retries.

        Args:
            fn: The fallback, a function of the request and the failure; it
                may be async (``async def``), and then only an async client
                runs the pipeline.

        Raises:
            TypeError: `fn` is not callable, or not with two arguments.

        Example:
            >>> import httpx
            >>> def offline(request, failure):
            ...     return httpx.Response(200, json={"items": [], "offline": True})
            >>> ResiliencePipeline().add_retry().add_fallback(offline)
            ResiliencePipeline(fallback, retry)
        """
        return self._degrading(fallback_step(fn), 0)

    def add_stale_cache(
        self, options: StaleCacheOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a stale cache: the last good answer to a read, when the host fails.

        RFC 5861's stale-if-error, for GET and HEAD: see `StaleCacheOptions`
        for what is kept, what never is, and when it is served. A stale
        answer has an ``Age`` header and is marked degraded
        (`degradation(response)`: source ``"stale-cache"``, its age).

        It goes outside every step but the fallbacks, wherever it is added:
        it serves only when the whole call has given up.

        Args:
            options: The cache's options (`max_stale` has no default).
            **fields: `StaleCacheOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid, unknown or missing.
            TypeError: Both `options` and fields, or `options` of another type.
            ValueError: The pipeline has a stale cache already.

        Example:
            >>> ResiliencePipeline().add_retry().add_stale_cache(max_stale="5m")
            ResiliencePipeline(stale cache, retry)
        """
        cache = _options(StaleCacheOptions, options, fields, "add_stale_cache")
        if any(isinstance(step, StaleCacheOptions) for step in self._steps):
            raise ValueError(
                "add_stale_cache: the pipeline has a stale cache already; one "
                "is enough (a second would only keep the same answers twice)"
            )
        return self._degrading(cache, 1)

    def add_timeout(self, timeout: DurationInput) -> ResiliencePipeline:
        """Add a timeout: what is added after it must end within `timeout`.

        Args:
            timeout: A `timedelta`, seconds, ``"300ms"``, ``"2s"`` or ISO 8601;
                more than zero, at most 24 days.

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

    def add_retry_budget(
        self, options: RetryBudgetOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a retry budget: it bounds the retries and hedged copies added after it.

        Over its window, per host by default, the retries and hedged copies
        sent are at most `retry_budget_ratio` times the calls, plus
        `retry_budget_min_per_second` a second; one it refuses is not sent,
        and the call ends with what its last attempt gave. Add it before
        (outside) the retry or hedging it governs.

        Args:
            options: The budget's options; default `RetryBudgetOptions()`.
            **fields: `RetryBudgetOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
            ValueError: A retry or hedging was added before it: a budget
                governs only what is added after it.

        Example:
            >>> budget = ResiliencePipeline().add_retry_budget(retry_budget_ratio=0.1)
            >>> budget.add_retry()
            ResiliencePipeline(retry budget, retry)
        """
        budget = _options(RetryBudgetOptions, options, fields, "add_retry_budget")
        outer = [step.label for step in self._steps if step.repeats]
        if outer:
            raise ValueError(
                f"add_retry_budget: it governs the retry and hedging added after "
                f"it, but {', '.join(outer)} came before; add the budget first"
            )
        return self._with(budget)

    def add_limiter(
        self, options: ConcurrencyLimiterOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a concurrency limiter around what is added after it.

        Args:
            options: The limiter's options; default `ConcurrencyLimiterOptions()`.
            **fields: `ConcurrencyLimiterOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.
        """
        return self._with(
            _options(ConcurrencyLimiterOptions, options, fields, "add_limiter")
        )

    def add_adaptive_limiter(
        self, options: AdaptiveLimiterOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a concurrency limit per host, learned from its latency, around the rest.

        The limit moves from `initial_limit` within [`min_limit`,
        `max_limit`]: cut at once when the host's latency rises above its
        baseline, grown slowly while it does not. A request beyond the limit
        and its queue is refused with `RateLimitedError` (reason
        ``"concurrency_limit"``), never retried, no evidence to a breaker.

        Args:
            options: The limiter's options; default `AdaptiveLimiterOptions()`.
            **fields: `AdaptiveLimiterOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid or unknown (named).
            TypeError: Both `options` and fields, or `options` of another type.

        Example:
            >>> ResiliencePipeline().add_adaptive_limiter(max_limit=200).add_retry()
            ResiliencePipeline(adaptive limiter, retry)
        """
        return self._with(
            _options(AdaptiveLimiterOptions, options, fields, "add_adaptive_limiter")
        )

    def add_rate_limiter(
        self, options: RateLimiterOptions | None = None, /, **fields: Any
    ) -> ResiliencePipeline:
        """Add a rate limiter: at most `permits_per_second` through, per host.

        A token bucket on the pipeline's clock: a request beyond the rate is
        refused at once with `RateLimitedError` (reason ``"rate_limit"``,
        ``retry_after`` the wait for the next permit), or, within
        `queue_limit`, waits for its permit, never past the deadline of a
        timeout around it.

        Args:
            options: The limiter's options (`permits_per_second` has no
                default).
            **fields: `RateLimiterOptions` fields, instead of `options`.

        Raises:
            pydantic.ValidationError: A field is invalid, unknown or missing.
            TypeError: Both `options` and fields, or `options` of another type.

        Example:
            >>> ResiliencePipeline().add_rate_limiter(permits_per_second=20)
            ResiliencePipeline(rate limiter 20/s)
        """
        return self._with(
            _options(RateLimiterOptions, options, fields, "add_rate_limiter")
        )

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

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResiliencePipeline):
            return NotImplemented
        return self._steps == other._steps

    def __hash__(self) -> int:
        return hash(self._steps)

    def __repr__(self) -> str:
        names = ", ".join(step.label for step in self._steps)
        return f"ResiliencePipeline({names})"
