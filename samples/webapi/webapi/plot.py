"""The demo's plot: every order's answer and latency, the rates, the breaker.

Two panels over the same seconds of the run:

- above, each order as a dot at the time it was sent and the time it took:
  red when it failed (any answer but 2xx, or none), blue-green when it
  succeeded;
- below, orders per second (answered 2xx and failed, stacked, the same two
  colours) and, as a line, the requests that reached the inventory per
  second (the physical attempts the orders made).

On both, the inventory's outage is hatched and the breaker's open spans are
shaded and labelled, so a reader sees the failures fall inside them.

matplotlib types most keyword arguments as unknown, which strict pyright
reports on every call: that one check is off in this module only.
"""

# pyright: reportUnknownMemberType=false

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

BIN = 0.5  # seconds
OK = "#2a9d8f"  # calm: answered 2xx
FAILED = "#d62828"  # red: any other answer
BREAKER = "#f4a261"  # the breaker open
HALF_OPEN = "#e9c46a"  # the breaker letting a probe through
INVENTORY = "#264653"  # the physical requests


def _succeeded(status: int) -> bool:
    """2xx; anything else (4xx, 5xx, no answer at all: 0) is a failure."""
    return 200 <= status < 300


def open_spans(
    transitions: Sequence[tuple[float, str]], end: float
) -> list[tuple[float, float, str]]:
    """``(start, end, state)`` of each span the breaker was not closed, in [0, `end`].

    A transition outside the run (before its first order, or as the services
    stop after its last) is cut to it: a span, and its label, stay inside the
    plot.

    Example:
        >>> open_spans([(1.0, "open"), (2.0, "half_open"), (2.5, "closed")], 5)
        [(1.0, 2.0, 'open'), (2.0, 2.5, 'half_open')]
        >>> open_spans([(-1.0, "open"), (2.0, "half_open"), (7.0, "closed")], 5)
        [(0, 2.0, 'open'), (2.0, 5, 'half_open')]
        >>> open_spans([], 5)
        []
    """
    ends = [at for at, _ in transitions[1:]] + [end] if transitions else []
    spans = [
        (max(at, 0), min(until, end), state)
        for (at, state), until in zip(transitions, ends, strict=True)
    ]
    return [span for span in spans if span[2] != "closed" and span[1] > span[0]]


def plot(
    path: Path,
    *,
    rate: float,
    duration: float,
    outage: tuple[float, float],
    orders: Sequence[tuple[float, float, int]],
    attempts: Sequence[float],
    transitions: Sequence[tuple[float, str]],
) -> None:
    """Write the plot to `path` (PNG).

    Args:
        path: Where to write it.
        rate: Orders sent a second.
        duration: Seconds the load ran.
        outage: When the inventory was down, seconds into the run.
        orders: ``(sent at, seconds taken, status)`` of each order.
        attempts: When each inventory request arrived.
        transitions: ``(when, new state)`` of the inventory's breaker.
    """
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    end = max([duration, *(at + took for at, took, _ in orders)])
    bins = [BIN * n for n in range(math.ceil(end / BIN) + 1)]
    figure, (latency, rates) = plt.subplots(
        2, 1, figsize=(11, 7), sharex=True, height_ratios=(3, 2)
    )
    spans = open_spans(transitions, end)
    for axes in (latency, rates):
        axes.axvspan(*outage, facecolor="none", hatch="///", edgecolor="#888888")
        for start, until, state in spans:
            colour = BREAKER if state == "open" else HALF_OPEN
            axes.axvspan(start, until, color=colour, alpha=0.35, linewidth=0)
        axes.grid(axis="y", alpha=0.3)
    for start, until, state in spans:
        if state == "open":
            latency.annotate(
                "breaker\nopen",
                xy=((start + until) / 2, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, -4),
                textcoords="offset points",
                ha="center",
                va="top",
                fontsize=8,
                color="#9c4a00",
            )

    for succeeded, colour, size in ((True, OK, 9), (False, FAILED, 12)):
        dots = [
            (at, took * 1000)
            for at, took, status in orders
            if _succeeded(status) is succeeded
        ]
        if dots:
            latency.scatter(*zip(*dots, strict=True), s=size, color=colour)
    latency.set_ylabel("order latency (ms)")
    latency.set_ylim(bottom=0)
    latency.set_title(f"Orders at {rate:g} a second against a flaky inventory")

    def per_second(times: Sequence[float]) -> list[float]:
        return [1 / BIN] * len(times)

    placed = [at for at, _, status in orders if _succeeded(status)]
    failed = [at for at, _, status in orders if not _succeeded(status)]
    rates.hist(
        [placed, failed],
        bins=bins,
        weights=[per_second(placed), per_second(failed)],
        stacked=True,
        color=[OK, FAILED],
    )
    rates.hist(
        attempts,
        bins=bins,
        weights=per_second(attempts),
        histtype="step",
        linewidth=2,
        color=INVENTORY,
    )
    rates.set_ylabel("per second")
    rates.set_xlabel("seconds into the run (by when each order was sent)")
    rates.set_xlim(0, end)

    legend = [
        Patch(color=OK, label="order answered 2xx"),
        Patch(color=FAILED, label="order failed (any other answer)"),
        Line2D([], [], color=INVENTORY, linewidth=2, label="inventory requests"),
        Patch(facecolor="none", hatch="///", edgecolor="#888888", label="outage"),
        Patch(color=BREAKER, alpha=0.35, label="breaker open"),
        Patch(color=HALF_OPEN, alpha=0.35, label="breaker half-open"),
    ]
    figure.legend(handles=legend, loc="lower center", ncols=6, fontsize=8)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(path, dpi=100)
    plt.close(figure)
