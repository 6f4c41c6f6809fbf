"""What `@retryable` costs when the first attempt succeeds, beside tenacity and stamina.

Run by `make bench`. Every row sends (or calls) a trivial async handler that
returns at once; the figures are ns per call, best of several repeats, with the
ratio to the matching baseline. Budgets (DESIGN section 8, issue 4):

- a `@retryable` request that succeeds first time: <= 1 us over an unmarked one;
- an unmarked request pays ~0 for `RetryBehavior` being registered.

tenacity and stamina are measured the way their docs show a decorator.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

from injector import Injector
from tenacity import retry, stop_after_attempt

from mediator import Mediator, MediatorModule, Query, QueryHandler
from mediator_resilience import ResilienceMediatorModule, retryable

REPEATS = 7
NUMBER = 40_000
BUDGET_RETRYABLE_NS = 1_000.0
BUDGET_UNMARKED_NS = 25.0  # "~0": within the noise of one dictionary lookup


class Plain(Query[int]):
    pass


@retryable
class Marked(Query[int]):
    pass


class PlainHandler(QueryHandler[Plain, int]):
    async def handle(self, request: Plain) -> int:
        return 1


class MarkedHandler(QueryHandler[Marked, int]):
    async def handle(self, request: Marked) -> int:
        return 1


async def handler_body() -> int:
    return 1


@retry(stop=stop_after_attempt(4))
async def with_tenacity() -> int:
    return 1


def _stamina() -> Callable[[], Awaitable[int]] | None:
    try:
        import stamina
    except ImportError:
        return None

    @stamina.retry(on=Exception, attempts=4)  # type: ignore[untyped-decorator,unused-ignore]
    async def with_stamina() -> int:
        return 1

    decorated: Callable[[], Awaitable[int]] = with_stamina
    return decorated


async def hand_written_loop() -> int:
    for attempt in range(4):
        try:
            return await handler_body()
        except ConnectionError:
            if attempt == 3:
                raise
    raise AssertionError("unreachable")


def _mediator(*, with_retry: bool) -> Mediator:
    # A @retryable request without RetryBehavior fails the build: the bare
    # mediator carries the unmarked request only.
    handlers = (PlainHandler, MarkedHandler) if with_retry else (PlainHandler,)
    modules: list[Any] = [MediatorModule(lambda m: m.add_handler(*handlers))]
    if with_retry:
        modules.append(ResilienceMediatorModule())
    return Injector(modules).get(Mediator)


async def _best(call: Callable[[], Awaitable[Any]]) -> float:
    for _ in range(2_000):  # warm-up
        await call()
    best = float("inf")
    for _ in range(REPEATS):
        gc.disable()
        started = time.perf_counter()
        for _ in range(NUMBER):
            await call()
        elapsed = time.perf_counter() - started
        gc.enable()
        best = min(best, elapsed / NUMBER * 1e9)
    return best


async def main() -> None:
    bare = _mediator(with_retry=False)
    retrying = _mediator(with_retry=True)
    plain, marked = Plain(), Marked()
    rows: list[tuple[str, float, str]] = []

    direct = await _best(handler_body)
    rows.append(("direct call of the handler body", direct, "direct"))
    peers: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("hand-written retry loop", hand_written_loop),
        ("tenacity @retry decorator", with_tenacity),
    ]
    for label, call in peers:
        rows.append((label, await _best(call), "direct"))
    stamina_call = _stamina()
    if stamina_call is not None:
        rows.append(("stamina @retry decorator", await _best(stamina_call), "direct"))

    no_behavior = await _best(lambda: bare.send(plain))
    unmarked = await _best(lambda: retrying.send(plain))
    first_time = await _best(lambda: retrying.send(marked))
    rows += [
        ("send, unmarked, no RetryBehavior registered", no_behavior, "send"),
        ("send, unmarked, RetryBehavior registered", unmarked, "send"),
        ("send, @retryable, succeeds first time", first_time, "send"),
    ]

    print(f"{'path':<50} {'ns/call':>9} {'over baseline':>14}")
    for label, ns, baseline in rows:
        base = direct if baseline == "direct" else no_behavior
        print(f"{label:<50} {ns:>9,.0f} {ns - base:>+14,.0f}")
    retryable_over = first_time - unmarked
    unmarked_over = unmarked - no_behavior
    print()
    print(
        f"@retryable over unmarked: {retryable_over:+,.0f} ns "
        f"(budget <= {BUDGET_RETRYABLE_NS:,.0f} ns: "
        f"{'met' if retryable_over <= BUDGET_RETRYABLE_NS else 'MISSED'})"
    )
    print(
        f"unmarked, behavior registered vs not: {unmarked_over:+,.0f} ns "
        f"(budget ~0, i.e. <= {BUDGET_UNMARKED_NS:.0f} ns of noise: "
        f"{'met' if unmarked_over <= BUDGET_UNMARKED_NS else 'MISSED'})"
    )


if __name__ == "__main__":
    asyncio.run(main())
