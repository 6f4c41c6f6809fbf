"""`health`: one client's breakers, limiters and retry budgets, as frozen snapshots.

A snapshot is read while the client runs, from any thread, without stopping
it: each figure is current when read, and the figures of one snapshot may be
a call apart. Hosts are named as events name them (``scheme://host:port``),
never with a path, a query or credentials.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final, Literal, TypeAlias

import httpx

from http_resilience._core.events import OPEN
from http_resilience._fleet.breaker import AsyncSharedBreaker, SyncSharedBreaker
from http_resilience._strategies.adaptive.strategy import (
    AsyncAdaptiveLimiter,
    SyncAdaptiveLimiter,
)
from http_resilience._strategies.breaker.control import ManualState
from http_resilience._strategies.breaker.state import CircuitBreaker
from http_resilience._strategies.breaker.strategy import (
    AsyncBreaker,
    BreakerStrategy,
    SyncBreaker,
)
from http_resilience._strategies.budget.strategy import (
    AsyncRetryBudget,
    SyncRetryBudget,
)
from http_resilience._strategies.concurrency.strategy import AsyncLimiter, SyncLimiter
from http_resilience._transport.registry import transports_of
from http_resilience._transport.transport import (
    AsyncResilientTransport,
    ResilientTransport,
)

__all__ = [
    "ISOLATED",
    "AdaptiveLimitHealth",
    "BaselineHealth",
    "BudgetHealth",
    "CircuitState",
    "ClientHealth",
    "HostHealth",
    "LimiterHealth",
    "Target",
    "breaker_strategies",
    "health",
    "resilient_transports",
]

CircuitState: TypeAlias = Literal["closed", "open", "half_open", "isolated"]
"""A host's breaker as `health` reads it: its state, or isolated by an operator."""

ISOLATED: Final = "isolated"

Target: TypeAlias = (
    httpx.AsyncClient | httpx.Client | AsyncResilientTransport | ResilientTransport
)
"""A client built by this package, or a resilient transport."""

_WORST: Final[dict[str, int]] = {"closed": 0, "half_open": 1, "open": 2, ISOLATED: 3}


@dataclass(frozen=True, slots=True)
class BaselineHealth:
    """What a host's breaker learned of the host's own normal, and what it sets.

    Attributes:
        armed: Whether the adaptive rules read it: it has learned
            `baseline_min_samples` attempts since it was made, or since the
            breaker last opened (a host that recovers is measured again).
        samples: The attempts learned since then.
        p50: The median latency of a successful attempt, in seconds (the upper
            edge of its bucket: at most 19 % above the true one); 0.0 before any.
        p95: The 95th percentile, the same way.
        error_rate: The share of attempts that failed, older ones weighing less
            (`baseline_half_life`).
        failure_threshold: The failure ratio that opens the breaker now:
            `failure_ratio`, or once armed `breaker_baseline_factor` times
            `error_rate` (never below `failure_ratio`, never above halfway
            from `error_rate` to 1).
        attempt_timeout: Once armed with `adaptive_timeout_factor` on, the
            most seconds an attempt to the host is given (the configured
            `attempt_timeout` still bounds it); None: the configured one.
    """

    armed: bool
    samples: int
    p50: float
    p95: float
    error_rate: float
    failure_threshold: float
    attempt_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class HostHealth:
    """One host's circuit breaker.

    Attributes:
        host: ``scheme://host:port``; ``"*"`` for the one breaker every host
            shares (``breaker_per_host=False``), ``"(overflow)"`` for the
            breaker of hosts beyond a full registry.
        state: ``"closed"``, ``"open"``, ``"half_open"`` (one probe in
            flight), or ``"isolated"`` (refused until an operator resets it).
        retry_after: While open: seconds until the next call may go as the
            probe (0.0 once the break is over: the next call probes); else
            None.
        fleet: Whether the host is refused because the replicas hold it
            open (a client with a `SharedState`: another replica's breaker,
            or an operator's isolation there), while this replica's own
            breaker would let the call go; its `state` is then ``"open"``.
        baseline: What the host's breaker learned of it, when an adaptive rule
            is on (the standard pipeline's defaults); None otherwise. A
            measurement, not a state: two snapshots compare equal whatever
            their baselines.
    """

    host: str
    state: CircuitState
    retry_after: float | None = None
    fleet: bool = False
    baseline: BaselineHealth | None = field(default=None, compare=False)

    @property
    def refusing(self) -> bool:
        """Whether a call to the host is refused now: isolated, or open in its break."""
        if self.state == ISOLATED:
            return True
        return self.state == OPEN and bool(self.retry_after)


@dataclass(frozen=True, slots=True)
class LimiterHealth:
    """A concurrency limiter's use.

    Attributes:
        in_use: Requests inside now.
        limit: Requests let inside at once (`concurrency_limit`).
        queued: Requests waiting for a permit.
        queue_limit: Requests that may wait.
    """

    in_use: int
    limit: int
    queued: int
    queue_limit: int


@dataclass(frozen=True, slots=True)
class AdaptiveLimitHealth:
    """One host's adaptive concurrency limit, as its latency set it.

    Attributes:
        host: ``scheme://host:port``; ``"*"`` for the limit every host shares
            (``per_host=False``).
        limit: Requests let inside at once now, within [min_limit, max_limit].
        in_use: Requests inside now.
        queued: Requests waiting for a permit.
        queue_limit: Requests that may wait.
        min_limit: The lowest the limit goes.
        max_limit: The highest.
        baseline_rtt: The host's long-term latency the limit compares
            against, in seconds; 0.0 before its first sample window closed.
    """

    host: str
    limit: int
    in_use: int
    queued: int
    queue_limit: int
    min_limit: int
    max_limit: int
    baseline_rtt: float


@dataclass(frozen=True, slots=True)
class BudgetHealth:
    """One host's retry budget over its window, now.

    Attributes:
        host: ``scheme://host:port``; ``"*"`` for the budget every host shares.
        calls: Calls started (first attempts) in the window.
        retries: Retries and hedged copies charged in the window.
        retries_allowed: How many the budget allows in the window now; a
            retry beyond it is refused.
    """

    host: str
    calls: int
    retries: int
    retries_allowed: int


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """One client's breakers, limiters and retry budgets, as read just now.

    Attributes:
        client: The client's name.
        sync: True for an `httpx.Client` (or a `ResilientTransport`), False
            for the async kind: a factory's two clients of one name have
            breakers of their own.
        hosts: Every host a breaker knows, or an operator isolated, sorted.
        limiters: Each concurrency limiter of the client's pipelines (one per
            transport: the client's own, then its mounts'); empty when the
            pipeline has none.
        budgets: Each host's retry budget, sorted; empty when the pipeline
            has none.
        adaptive_limits: Each host's adaptive concurrency limit, sorted;
            empty when the pipeline has no adaptive limiter.

    Example:
        >>> from http_resilience import create_client, health
        >>> client = create_client(
        ...     "inventory",
        ...     transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        ... )
        >>> _ = client.get("https://user:secret@inventory.local/items?page=2")
        >>> [(host.host, host.state) for host in health(client).hosts]
        [('https://inventory.local:443', 'closed')]
    """

    client: str
    sync: bool
    hosts: tuple[HostHealth, ...]
    limiters: tuple[LimiterHealth, ...]
    budgets: tuple[BudgetHealth, ...]
    adaptive_limits: tuple[AdaptiveLimitHealth, ...] = ()

    @property
    def refusing(self) -> tuple[HostHealth, ...]:
        """The hosts calls are refused for now: isolated, or open in their break.

        A breaker whose break is over is not among them: the next call is its
        probe, and a readiness check must not wait for calls that a service
        taken out of rotation would never make.
        """
        return tuple(host for host in self.hosts if host.refusing)


def resilient_transports(
    target: object, *, what: str
) -> tuple[AsyncResilientTransport | ResilientTransport, ...]:
    """The resilient transports of `target`: a client built here, or a transport.

    Raises:
        TypeError: `target` is neither (the message starts with `what`).
    """
    if isinstance(target, AsyncResilientTransport | ResilientTransport):
        return (target,)
    if isinstance(target, httpx.AsyncClient | httpx.Client):
        try:
            return transports_of(target)
        except TypeError as error:
            raise TypeError(f"{what}: {error}") from None
    raise TypeError(
        f"{what} takes a client made by create_async_client, create_client or "
        "an HttpClientFactory, or a resilient transport; got "
        f"{type(target).__qualname__}"
    )


def breaker_strategies(
    transport: AsyncResilientTransport | ResilientTransport,
) -> list[AsyncBreaker | SyncBreaker]:
    """The circuit breakers of `transport`'s pipeline, outermost first."""
    return [
        strategy
        for strategy in transport.strategies
        if isinstance(strategy, AsyncBreaker | SyncBreaker)
    ]


def health(target: Target) -> ClientHealth:
    """What the breakers, limiters and retry budgets of a client say now.

    Thread-safe, and cheap enough for a health check: it reads counts and
    sends nothing. For every client of an `HttpClientFactory`, use its
    `health` method.

    Args:
        target: A client made by `create_async_client`, `create_client` or
            an `HttpClientFactory`, or an `AsyncResilientTransport` or
            `ResilientTransport`.

    Returns:
        The client's `ClientHealth`; a client with mounts reports its own
        transport's hosts and its mounts' together (a host two of them know
        is reported once, in the worse state).

    Raises:
        TypeError: `target` is none of these, or an httpx client this package
            did not build (give its transport instead).

    Example:
        >>> from http_resilience import create_client
        >>> client = create_client(
        ...     transport=httpx.MockTransport(lambda request: httpx.Response(503))
        ... )
        >>> health(client).limiters
        (LimiterHealth(in_use=0, limit=1000, queued=0, queue_limit=0),)
    """
    transports = resilient_transports(target, what="health()")
    hosts: dict[str, HostHealth] = {}
    limiters: list[LimiterHealth] = []
    budgets: dict[str, BudgetHealth] = {}
    adaptive: dict[str, AdaptiveLimitHealth] = {}
    for transport in transports:
        for strategy in transport.strategies:
            if isinstance(strategy, AsyncBreaker | SyncBreaker):
                for host in _hosts(strategy):
                    found = hosts.get(host.host)
                    if found is None or _WORST[host.state] > _WORST[found.state]:
                        hosts[host.host] = host
            elif isinstance(strategy, AsyncLimiter | SyncLimiter):
                counts = strategy.limiter.counts
                limiters.append(
                    LimiterHealth(
                        counts.in_use,
                        counts.permits,
                        counts.queued,
                        counts.queue_limit,
                    )
                )
            elif isinstance(strategy, AsyncRetryBudget | SyncRetryBudget):
                now = strategy.strategy.now()
                for key, budget in strategy.strategy.budgets():
                    budgets[key] = BudgetHealth(key, *budget.usage(now))
            elif isinstance(strategy, AsyncAdaptiveLimiter | SyncAdaptiveLimiter):
                for key, limit in strategy.strategy.limits():
                    adaptive[key] = AdaptiveLimitHealth(
                        key,
                        limit.limit,
                        limit.in_use,
                        limit.queued,
                        limit.queue_limit,
                        limit.min_limit,
                        limit.max_limit,
                        limit.baseline_rtt,
                    )
    first = transports[0]
    return ClientHealth(
        first.name,
        isinstance(first, ResilientTransport),
        tuple(hosts[key] for key in sorted(hosts)),
        tuple(limiters),
        tuple(budgets[key] for key in sorted(budgets)),
        tuple(adaptive[key] for key in sorted(adaptive)),
    )


def _hosts(driver: AsyncBreaker | SyncBreaker) -> list[HostHealth]:
    strategy = driver.strategy
    manual: ManualState = strategy.manual
    isolated = manual.isolated
    now = strategy.now()
    hosts = [HostHealth(key, ISOLATED) for key in isolated]
    for key, breaker in driver.breakers():
        if key in isolated:
            continue
        learned = _baseline(strategy, breaker)
        if manual.resetting(key):
            hosts.append(HostHealth(key, "closed", baseline=learned))
        else:
            hosts.append(
                HostHealth(
                    key, breaker.state, breaker.retry_after(now), baseline=learned
                )
            )
    if isinstance(driver, AsyncSharedBreaker | SyncSharedBreaker):
        hosts = _fleet(driver, hosts)
    return hosts


def _baseline(
    strategy: BreakerStrategy, breaker: CircuitBreaker
) -> BaselineHealth | None:
    """What `breaker` learned of its host, read now; None without a baseline."""
    baseline = breaker.baseline
    if baseline is None:
        return None
    p50, p95 = baseline.quantiles(0.5, 0.95)
    cap = breaker.attempt_cap()
    return BaselineHealth(
        armed=baseline.armed,
        samples=baseline.samples,
        p50=p50,
        p95=p95,
        error_rate=baseline.error_rate,
        failure_threshold=breaker.threshold(),
        attempt_timeout=cap,
    )


def _fleet(
    driver: AsyncSharedBreaker | SyncSharedBreaker, hosts: list[HostHealth]
) -> list[HostHealth]:
    """`hosts`, with those the replicas hold open in their break marked so."""
    share = driver.share
    view = share.open_hosts
    if not (view and share.up):
        return hosts
    wall = share.wall()
    isolated = driver.strategy.manual.isolated
    known = {host.host: host for host in hosts}
    for key, fleet in view.items():
        left = fleet.until - wall
        local = known.get(key)
        if left <= 0 or key in isolated or (local is not None and local.refusing):
            continue
        if local is None:
            known[key] = HostHealth(key, OPEN, left, fleet=True)
        else:
            known[key] = replace(local, state=OPEN, retry_after=left, fleet=True)
    return list(known.values())
