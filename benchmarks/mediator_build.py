"""Start-up cost: building a mediator of many request types with `use_defaults()`.

The request types, their handlers and the injector are made first; what is
timed is `injector.get(Mediator)`, which compiles every route (the handler's
factory, the behaviors that apply, the send and send_sync closures), with the
cyclic garbage collector in its default state, as an application has it. It
reports microseconds per request type, best of a few runs, each in a fresh
injector with fresh types. It only reports: it never fails on a timing.

The budget (issue 12): <= 40 us per type for 10,000 types.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import types
from time import perf_counter
from typing import Any

from injector import Injector

from mediator import Mediator, MediatorModule, Query, QueryHandler

TYPES = 10_000
REPEATS = 3
BUDGET_US = 40.0


def _handlers(count: int, run: int) -> list[type[Any]]:
    """`count` distinct query types, each with its own trivial handler."""

    def handle(self: Any, request: Any) -> int:
        return 1

    handlers: list[type[Any]] = []
    for i in range(count):
        query = type(f"Q{run}_{i}", (Query[int],), {"__module__": __name__})
        handler = types.new_class(
            f"H{run}_{i}",
            (QueryHandler[query, int],),  # type: ignore[valid-type]
            exec_body=lambda ns: ns.update(handle=handle, __module__=__name__),
        )
        handlers.append(handler)
    return handlers


def _build_seconds(count: int, run: int) -> float:
    handlers = _handlers(count, run)
    injector = Injector(
        [MediatorModule(lambda m: m.add_handler(*handlers).use_defaults())]
    )
    started = perf_counter()
    mediator = injector.get(Mediator)
    elapsed = perf_counter() - started
    if len(mediator._send_routes) != count:  # pyright: ignore[reportPrivateUsage]
        raise RuntimeError("the mediator did not compile every route")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description="Time building a mediator.")
    parser.add_argument("--types", type=int, default=TYPES)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    print(f"Python {platform.python_version()} on {sys.platform}, gc enabled")
    best = min(_build_seconds(args.types, run) for run in range(args.repeats))
    gc.collect()
    per_type = best / args.types * 1e6
    verdict = "met" if per_type <= BUDGET_US else "missed"
    print(
        f"build, use_defaults(), {args.types:,} request types: "
        f"{best * 1000:,.0f} ms, {per_type:.1f} us per type "
        f"(budget <= {BUDGET_US:.0f} us: {verdict})"
    )


if __name__ == "__main__":
    main()
