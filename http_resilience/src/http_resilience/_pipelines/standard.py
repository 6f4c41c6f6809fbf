"""`HttpResilienceOptions`: the standard pipeline of one named HTTP client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from http_resilience._core.builder import StepOptions
from http_resilience._core.classify import (
    DEFAULT_FAILURE_STATUSES,
    SAFE_METHODS,
    Backoff,
    Classifier,
)
from http_resilience._core.fields import (
    Methods,
    NonNegativeCount,
    NonNegativeDuration,
    PositiveCount,
    PositiveDuration,
    RatioOrOff,
    StatusCodes,
    UnitRatio,
)
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.nested import NestedRetries
from http_resilience._pipelines.config import (
    ENVIRONMENT_PREFIX,
    apply_environment,
    client_environment,
    client_variables,
    env_client_name,
    read_config,
)
from http_resilience._primitives.backoff import delays_problem
from http_resilience._primitives.durations import in_seconds
from http_resilience._primitives.setting import default
from http_resilience._strategies.adaptive.options import (
    DEFAULT_INITIAL_LIMIT,
    AdaptiveLimiterOptions,
)
from http_resilience._strategies.breaker.options import (
    DEFAULT_ADAPTIVE_TIMEOUT_FACTOR,
    DEFAULT_BASELINE_HALF_LIFE,
    DEFAULT_BASELINE_MIN_SAMPLES,
    DEFAULT_BREAK_DURATION,
    DEFAULT_BREAKER_BASELINE_FACTOR,
    DEFAULT_BREAKER_PER_HOST,
    DEFAULT_FAILURE_RATIO,
    DEFAULT_MINIMUM_THROUGHPUT,
    DEFAULT_SAMPLING_DURATION,
    DEFAULT_SLOW_CALL_FACTOR,
    DEFAULT_SLOW_CALL_RATIO,
    BreakerOptions,
)
from http_resilience._strategies.budget.options import (
    DEFAULT_BUDGET_PER_HOST,
    DEFAULT_RETRY_BUDGET_MIN_PER_SECOND,
    DEFAULT_RETRY_BUDGET_RATIO,
    DEFAULT_RETRY_BUDGET_WINDOW,
    RetryBudgetOptions,
)
from http_resilience._strategies.concurrency.options import (
    DEFAULT_CONCURRENCY_LIMIT,
    DEFAULT_QUEUE_LIMIT,
    ConcurrencyLimiterOptions,
)
from http_resilience._strategies.quota.options import (
    DEFAULT_QUOTA_LEGACY_HEADERS,
    DEFAULT_QUOTA_RESERVE,
    HeaderNames,
    QuotaOptions,
)
from http_resilience._strategies.retry.options import (
    DEFAULT_BACKOFF,
    DEFAULT_BASE_DELAY,
    DEFAULT_MAX_DELAY,
    DEFAULT_MAX_RETRY_ATTEMPTS,
    DEFAULT_RETRY_UNSAFE_METHODS,
    RetryOptions,
)
from http_resilience._strategies.timeout.options import (
    DEFAULT_ATTEMPT_TIMEOUT,
    DEFAULT_OWN_TRANSPORT_TIMEOUT,
    DEFAULT_TOTAL_REQUEST_TIMEOUT,
    TimeoutOptions,
)

__all__ = [
    "ENVIRONMENT_PREFIX",
    "HttpResilienceOptions",
    "apply_environment",
    "client_environment",
    "client_variables",
    "env_client_name",
    "standard_steps",
]
DEFAULT_MAX_BUFFERED_BYTES: Final = 16 * 1024 * 1024


class HttpResilienceOptions(BaseModel):
    """The standard pipeline of one named client, outermost strategy first.

    concurrency limiter, total timeout, retry budget, retry, published quota,
    circuit breaker, attempt timeout.

    The delay before retry n (1 for the first) is ``base_delay * 2**(n-1)``
    scaled by a random factor in [0.5, 1) (jitter is always on), unless a 429
    or 503 carries a valid ``Retry-After``, whose wait is used instead. A wait
    that would pass the total deadline ends the call at once.

    Attributes:
        max_retry_attempts: Retries after the first attempt; 0 turns retry off.
            Default 3.
        base_delay: The delay before the first retry. Default 2 s.
        attempt_timeout: The limit of one attempt (to the response headers).
            Default 10 s; must be less than `total_request_timeout`.
        total_request_timeout: The limit of the whole call, attempts and waits
            included. Default 30 s.
        failure_ratio: The share of failed attempts within the sampling window
            that opens the breaker, in (0, 1]. Default 0.1.
        sampling_duration: The breaker's sliding window. Default 30 s; must be
            at least twice `attempt_timeout`.
        minimum_throughput: Attempts needed in the window before the breaker
            can open. Default 100, which a quiet client never reaches: lower it
            for a dependency you call a few times a minute.
        break_duration: How long an open breaker refuses before it lets one
            probe through. Default 5 s.
        concurrency_limit: Requests in flight at once. Default 1000.
        queue_limit: Requests that may wait for a permit; beyond that a request
            is refused with `RateLimitedError`. Default 0.
        retry_unsafe_methods: Retry POST, PATCH and CONNECT too. Default False:
            they are retried only when they carry an ``Idempotency-Key``.
        breaker_per_host: One breaker per scheme, host and port; False shares
            one breaker between every host. Default True.
        maximum_hosts: The per-host registry's bound (least recently used go
            first; open breakers are kept). Default 1024.
        own_transport_timeout: The pipeline owns time: each attempt's httpx
            phase timeouts are set from the attempt's own deadline, so httpx's
            default 5 s cannot cut a longer attempt short. Default True.
        retry_budget_ratio: Retries allowed per call, over the budget's window
            and per host: in an outage the client sends at most this share
            more than its calls, not four times as much. Default 0.2; None
            turns the budget off (``"none"`` in the environment).
        retry_budget_min_per_second: Retries per second allowed whatever the
            calls, so a quiet client can still retry. Default 10.
        retry_budget_window: The budget's sliding window. Default 10 s.
        budget_per_host: One retry budget per scheme, host and port (kept as
            the breakers are, at most `maximum_hosts`); False shares one
            between every host. Default True.
        quota_reserve: The share of a host's published quota held back: once
            ``remaining <= quota_reserve x quota`` (``RateLimit`` fields, or
            the legacy triple), attempts to it are refused in this process
            until the reset, with `RateLimitedError`. In [0, 1). Default 0.1;
            None reads no rate-limit headers at all.
        quota_legacy_headers: The legacy triple's names, in the order limit,
            remaining, reset. Default ``("X-RateLimit-Limit",
            "X-RateLimit-Remaining", "X-RateLimit-Reset")``; in the
            environment, the three joined by commas.
        retry_on_status: The statuses the retry sends again. Default 408, 429
            and every 5xx but 501 and 505; ints, ranges, or ``"429, 500-504"``.
        breaker_on_status: The statuses the breaker counts against the host.
            The same default and forms.
        should_retry: Your own say, per attempt outcome (a response or an
            exception), whether it is retried: True, False, or None to leave
            it to `retry_on_status`. Never asked about a cancellation.
        should_break: The same for the breaker.
        retry_methods: The methods retried without an ``Idempotency-Key``.
            Default GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
        backoff: ``"exponential"`` (the default), ``"linear"`` or
            ``"constant"``.
        max_delay: The longest backoff delay, before jitter; at least
            `base_delay`. A ``Retry-After`` is waited as asked. Default 30 s.
        detect_nested_retries: Retried attempts carry ``X-Retry-Attempt``,
            and calls made for a retrying caller follow `nested_retries`.
            Default True.
        nested_retries: ``"suppress"`` (no retry here while the caller
            retries) or ``"report"`` (retry, and report it). Default
            ``"suppress"``.
        buffer_responses: Read each answer's body inside its attempt, under
            the attempt's deadline: a body that breaks or stalls half-way is
            one more failed attempt, retried. Default False (the body is
            read after the call returns, as httpx does).
        max_buffered_bytes: With `buffer_responses`, the largest body read;
            a larger one fails the call with `ResponseTooLargeError`, not
            retried. Default 16 MiB.
        baseline_min_samples: Attempts each host's baseline (its own latency
            quantiles and error rate, learned while its breaker is closed and
            it is not failing) learns before the three adaptive rules below
            read it. Default 100.
        baseline_half_life: How fast a baseline forgets: an attempt counts
            half as much after this long. Default 10 minutes.
        adaptive_timeout_factor: Once a host's baseline is armed, its attempt
            timeout is at most this many times the host's 95th percentile
            (never below 1 s, never above `attempt_timeout`). Default 3.0;
            None: `attempt_timeout` alone.
        breaker_baseline_factor: Once armed, a host's breaker trips on this
            many times its own error rate, never below `failure_ratio`, never
            above halfway from that rate to 1. Default 5.0; None:
            `failure_ratio` alone.
        slow_call_factor: Once armed, an attempt is slow when it took longer
            than this many times the host's median (and at least 100 ms), or
            its attempt timeout cut it; the breaker also opens when
            `slow_call_ratio` of its window is slow. Default 3.0; None: off.
        slow_call_ratio: That share, in (0, 1]. Default 0.5.
        adaptive_concurrency: Replace the concurrency limiter by a limit per
            host learned from the host's latency (`AdaptiveLimiterOptions`),
            at most `concurrency_limit`, with `queue_limit`. Default False.

    Durations accept a `timedelta`, a number of seconds, ``"200ms"``, ``"2s"``,
    ``"5m"``, ``"1h"`` or ISO 8601 (``"PT0.2S"``), up to 24 days each.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field;
            the three cross-field rules name both fields, and the client when the
            options are read for one (`from_config`, or validation context
            ``{"client": name}``). Counts and `failure_ratio` refuse True and
            False.

    Example:
        >>> options = HttpResilienceOptions(max_retry_attempts=2, base_delay="100ms")
        >>> options.total_request_timeout
        datetime.timedelta(seconds=30)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    SECTION: ClassVar[str] = "resilience.http"

    max_retry_attempts: NonNegativeCount = DEFAULT_MAX_RETRY_ATTEMPTS
    base_delay: NonNegativeDuration = default(DEFAULT_BASE_DELAY)
    attempt_timeout: PositiveDuration = default(DEFAULT_ATTEMPT_TIMEOUT)
    total_request_timeout: PositiveDuration = default(DEFAULT_TOTAL_REQUEST_TIMEOUT)
    failure_ratio: UnitRatio = DEFAULT_FAILURE_RATIO
    sampling_duration: PositiveDuration = default(DEFAULT_SAMPLING_DURATION)
    minimum_throughput: PositiveCount = DEFAULT_MINIMUM_THROUGHPUT
    break_duration: PositiveDuration = default(DEFAULT_BREAK_DURATION)
    concurrency_limit: PositiveCount = DEFAULT_CONCURRENCY_LIMIT
    queue_limit: NonNegativeCount = DEFAULT_QUEUE_LIMIT
    retry_unsafe_methods: bool = DEFAULT_RETRY_UNSAFE_METHODS
    breaker_per_host: bool = DEFAULT_BREAKER_PER_HOST
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS
    own_transport_timeout: bool = DEFAULT_OWN_TRANSPORT_TIMEOUT
    retry_budget_ratio: RatioOrOff = Field(
        default=DEFAULT_RETRY_BUDGET_RATIO, ge=0.0, allow_inf_nan=False
    )
    retry_budget_min_per_second: NonNegativeCount = DEFAULT_RETRY_BUDGET_MIN_PER_SECOND
    retry_budget_window: PositiveDuration = default(DEFAULT_RETRY_BUDGET_WINDOW)
    budget_per_host: bool = DEFAULT_BUDGET_PER_HOST
    quota_reserve: RatioOrOff = Field(
        default=DEFAULT_QUOTA_RESERVE, ge=0.0, lt=1.0, allow_inf_nan=False
    )
    quota_legacy_headers: HeaderNames = DEFAULT_QUOTA_LEGACY_HEADERS
    retry_on_status: StatusCodes = default(DEFAULT_FAILURE_STATUSES)
    breaker_on_status: StatusCodes = default(DEFAULT_FAILURE_STATUSES)
    should_retry: Classifier | None = None
    should_break: Classifier | None = None
    retry_methods: Methods = default(SAFE_METHODS)
    backoff: Backoff = DEFAULT_BACKOFF
    max_delay: NonNegativeDuration = default(DEFAULT_MAX_DELAY)
    detect_nested_retries: bool = True
    nested_retries: NestedRetries = "suppress"
    buffer_responses: bool = False
    max_buffered_bytes: PositiveCount = DEFAULT_MAX_BUFFERED_BYTES
    baseline_min_samples: PositiveCount = DEFAULT_BASELINE_MIN_SAMPLES
    baseline_half_life: PositiveDuration = default(DEFAULT_BASELINE_HALF_LIFE)
    adaptive_timeout_factor: RatioOrOff = Field(
        default=DEFAULT_ADAPTIVE_TIMEOUT_FACTOR, ge=1.0, allow_inf_nan=False
    )
    breaker_baseline_factor: RatioOrOff = Field(
        default=DEFAULT_BREAKER_BASELINE_FACTOR, ge=1.0, allow_inf_nan=False
    )
    slow_call_factor: RatioOrOff = Field(
        default=DEFAULT_SLOW_CALL_FACTOR, gt=1.0, allow_inf_nan=False
    )
    slow_call_ratio: UnitRatio = DEFAULT_SLOW_CALL_RATIO
    adaptive_concurrency: bool = False

    @model_validator(mode="after")
    def _check_timing(self, info: ValidationInfo) -> Self:
        problems: list[str] = []
        if self.attempt_timeout >= self.total_request_timeout:
            problems.append(
                f"attempt_timeout ({in_seconds(self.attempt_timeout)}) must be less "
                f"than total_request_timeout ({in_seconds(self.total_request_timeout)})"
            )
        delays = delays_problem(self.base_delay, self.max_delay)
        if delays is not None:
            problems.append(delays)
        if self.sampling_duration < 2 * self.attempt_timeout:
            problems.append(
                f"sampling_duration ({in_seconds(self.sampling_duration)}) must be at "
                f"least twice attempt_timeout ({in_seconds(self.attempt_timeout)})"
            )
        if problems:
            context: object = info.context
            client: object = None
            if isinstance(context, Mapping):
                client = cast("Mapping[str, object]", context).get("client")
            where = "" if client is None else f"HTTP client {client!r}: "
            raise ValueError(where + "; ".join(problems))
        return self

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None = None,
        *,
        client: str = "default",
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Read one client's options from the configuration and the environment.

        Later sources win, field by field:

        1. the defaults;
        2. ``config["resilience"]["http"]``: every client's settings;
        3. ``config["resilience"]["http"]["clients"][client]``: this client's;
        4. ``RESILIENCE__HTTP__<FIELD>`` environment variables;
        5. ``RESILIENCE__HTTP__CLIENTS__<CLIENT>__<FIELD>`` environment variables.

        Environment names are matched in any case, and ``-`` in a client's name
        matches ``_``. An unknown key in a section or after a prefix is an
        error, and so is a ``RESILIENCE__HTTP__CLIENTS__<CLIENT>`` variable
        without a field. Options given in code (to `HttpClientFactory.add`)
        stand in for steps 1 to 3; the environment still applies on top
        (`apply_environment`).

        Args:
            config: The whole configuration, as nested mappings read from TOML,
                JSON or YAML. Missing sections mean defaults.
            client: The client whose options these are; named in errors.
            environ: The environment; `os.environ` when not given.

        Raises:
            pydantic.ValidationError: An unknown key or an invalid value, named;
                the title names the client, and the environment variable a
                value came from.
            TypeError: A section that is not a mapping, named, with the client.
            ValueError: A key under ``resilience`` that is no known section
                (``resilience.htpp``), with the nearest one.

        Example:
            >>> HttpResilienceOptions.from_config(
            ...     {"resilience": {"http": {
            ...         "max_retry_attempts": 2,
            ...         "clients": {"billing": {"max_retry_attempts": 0}},
            ...     }}},
            ...     client="billing",
            ...     environ={"RESILIENCE__HTTP__BASE_DELAY": "100ms"},
            ... ).max_retry_attempts
            0
        """
        return read_config(cls, cls.SECTION, config, client=client, environ=environ)


def standard_steps(options: HttpResilienceOptions) -> tuple[StepOptions, ...]:
    """The standard pipeline as the builder's steps, outermost first.

    Concurrency limiter, total timeout, retry budget (unless
    `retry_budget_ratio` is None), retry, published quota (unless
    `quota_reserve` is None), circuit breaker, attempt timeout: the builder's
    rules make the total timeout arm no timer of its
    own (the attempt timeout cuts at the earlier deadline) and the attempt
    timeout own the transport's time when `own_transport_timeout` says so.
    Each strategy's options take their fields from the same-named ones here.
    """
    steps: list[StepOptions] = [
        _limiter(options),
        TimeoutOptions(timeout=options.total_request_timeout),
    ]
    if options.retry_budget_ratio is not None:
        steps.append(_part(RetryBudgetOptions, options))
    steps.append(_part(RetryOptions, options))
    if options.quota_reserve is not None:
        steps.append(_part(QuotaOptions, options))
    steps.append(_part(BreakerOptions, options))
    steps.append(
        TimeoutOptions(
            timeout=options.attempt_timeout,
            own_transport_timeout=options.own_transport_timeout,
        )
    )
    return tuple(steps)


def _limiter(options: HttpResilienceOptions) -> StepOptions:
    """The static limiter, or with `adaptive_concurrency` the adaptive one."""
    if not options.adaptive_concurrency:
        return _part(ConcurrencyLimiterOptions, options)
    return AdaptiveLimiterOptions(
        max_limit=options.concurrency_limit,
        initial_limit=min(DEFAULT_INITIAL_LIMIT, options.concurrency_limit),
        queue_limit=options.queue_limit,
        maximum_hosts=options.maximum_hosts,
    )


_Part = TypeVar("_Part", bound=BaseModel)


def _part(kind: type[_Part], options: HttpResilienceOptions) -> _Part:
    """`kind`'s options, each field read from the field of that name in `options`."""
    return kind.model_validate(
        {name: getattr(options, name) for name in kind.model_fields}
    )
