"""100,000 hosts through one transport: the per-host registry stays bounded.

Every request goes to a host never seen before, through `AsyncResilientTransport`
around an `httpx.MockTransport`, with a small `maximum_hosts`. The registry of
per-host breakers (and of retry budgets) must never hold more than
`maximum_hosts`, and the memory
traced while the last 90,000 hosts go through must stay far below what keeping
them would cost. That cost is measured, not guessed: the same transport with a
bound it never reaches retains every host of a 5,000-host run.

Requests are handed to the transport itself, not through an `httpx.AsyncClient`:
the client adds nothing the registry sees, and triples the time under
tracemalloc (about 60 s for 100,000 requests, against about 20 s).

The registry is read through the transport's private ``_built`` (the built
pipeline, whose ``find`` gives its breaker strategy, whose ``registry``
property is public): the transport has no public accessor for it, and a test
that reads a private attribute is the lesser evil next to adding one for tests
alone.
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    HttpResilienceOptions,
)
from http_resilience._strategies.breaker.registry import HostRegistry
from http_resilience._strategies.breaker.strategy import AsyncBreaker
from http_resilience._strategies.budget.budget import BudgetRegistry
from http_resilience._strategies.budget.strategy import AsyncRetryBudget
from http_resilience.testing import FakeClock
from tests.support.figures import record

pytestmark = pytest.mark.anyio

HOSTS = 100_000
WARM_UP = 10_000  # hosts sent before tracing starts: the registry is full by then
MAXIMUM_HOSTS = 64
CHECK_EVERY = 1_000
BASELINE_HOSTS = 5_000  # hosts of the run that keeps every one of them
# Growth allowed while 90,000 hosts go through a bounded registry: what 1,000
# retained hosts cost (about 1% of keeping them all). What does remain is flat:
# the host-key cache's 256 entries and the strings they hold, about 125 KiB
# whether 10,000 hosts went through or 90,000.
ALLOWED_IN_HOSTS = 1_000


def transport(maximum_hosts: int, status: int = 200) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(status)),
        options=HttpResilienceOptions(maximum_hosts=maximum_hosts),
        clock=FakeClock(),
    )


def registry_of(subject: AsyncResilientTransport) -> HostRegistry:
    # No public accessor: see the module's docstring.
    built = subject._built  # pyright: ignore[reportPrivateUsage]
    breaker = built.find(AsyncBreaker)
    assert breaker is not None
    registry = breaker.strategy.registry
    assert registry is not None
    return registry


def budgets_of(subject: AsyncResilientTransport) -> BudgetRegistry:
    # The retry budgets are kept per host too, under the same bound.
    built = subject._built  # pyright: ignore[reportPrivateUsage]
    budget = built.find(AsyncRetryBudget)
    assert budget is not None
    registry = budget.strategy.registry
    assert registry is not None
    return registry


async def send_to(subject: AsyncResilientTransport, host: int) -> None:
    request = httpx.Request("GET", f"http://host-{host}.example/items")
    response = await subject.handle_async_request(request)
    await response.aclose()


async def traced_growth(
    subject: AsyncResilientTransport, first: int, last: int
) -> tuple[int, list[int]]:
    """Bytes still allocated after sending to hosts `first` to `last - 1`, traced.

    Also the registry's size at every `CHECK_EVERY` hosts.
    """
    registry = registry_of(subject)
    sizes: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        for host in range(first, last):
            await send_to(subject, host)
            if host % CHECK_EVERY == 0:
                sizes.append(len(registry))
        gc.collect()
        grown, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return grown, sizes


# About 22 s of CPU, nearly all of it tracemalloc's; the margin is for a busy
# machine, not for a slower transport.
@pytest.mark.timeout(120)
async def test_100_000_hosts_keep_the_registry_and_memory_bounded() -> None:
    started = time.perf_counter()

    # What one retained host costs: a bound this run never reaches keeps all.
    keeping = transport(maximum_hosts=BASELINE_HOSTS * 10)
    kept, _ = await traced_growth(keeping, 0, BASELINE_HOSTS)
    assert len(registry_of(keeping)) == BASELINE_HOSTS
    per_host = kept / BASELINE_HOSTS
    # A breaker, its key and its slot: if this were near zero, the comparison
    # below would prove nothing.
    assert per_host > 200

    bounded = transport(maximum_hosts=MAXIMUM_HOSTS)
    registry = registry_of(bounded)
    sizes: list[int] = []
    for host in range(WARM_UP):
        await send_to(bounded, host)
        if host % CHECK_EVERY == 0:
            sizes.append(len(registry))
    grown, traced_sizes = await traced_growth(bounded, WARM_UP, HOSTS)
    sizes += traced_sizes
    seconds = time.perf_counter() - started

    assert len(sizes) == HOSTS // CHECK_EVERY
    assert max(sizes) <= MAXIMUM_HOSTS
    assert len(registry) == MAXIMUM_HOSTS
    # The most recent hosts are the ones held.
    assert registry.keys()[-1] == f"http://host-{HOSTS - 1}.example:80"
    budgets = budgets_of(bounded)
    assert len(budgets) == MAXIMUM_HOSTS
    assert budgets.keys()[-1] == f"http://host-{HOSTS - 1}.example:80"
    assert len(budgets_of(keeping)) == BASELINE_HOSTS
    allowed = per_host * ALLOWED_IN_HOSTS
    record(
        "host_registry_memory",
        hosts=HOSTS,
        maximum_hosts=MAXIMUM_HOSTS,
        traced_hosts=HOSTS - WARM_UP,
        tracemalloc_growth_kib=round(grown / 1024, 1),
        allowed_kib=round(allowed / 1024, 1),
        retained_per_host_bytes=round(per_host),
        retained_baseline_kib=round(kept / 1024, 1),
        seconds=round(seconds, 1),
    )
    assert grown < allowed


async def test_open_breakers_never_grow_the_registry_past_its_bound() -> None:
    # Every host fails and trips its breaker at once; open breakers are never
    # evicted, so once every slot is open, new hosts share the overflow breaker.
    failing = AsyncResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(503)),
        options=HttpResilienceOptions(
            maximum_hosts=MAXIMUM_HOSTS,
            max_retry_attempts=0,
            minimum_throughput=1,
            failure_ratio=1.0,
        ),
        clock=FakeClock(),
    )
    registry = registry_of(failing)
    refused = 0
    for host in range(20_000):
        try:
            await send_to(failing, host)
        except BrokenCircuitError:  # the overflow breaker, once open
            refused += 1
        if host % CHECK_EVERY == 0:
            assert len(registry) <= MAXIMUM_HOSTS
    assert len(registry) == MAXIMUM_HOSTS
    # All but the hosts that filled the slots, and the one that opened the
    # overflow breaker, were refused without being sent.
    assert refused == 20_000 - MAXIMUM_HOSTS - 1
