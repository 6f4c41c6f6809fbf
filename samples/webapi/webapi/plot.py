"""The demo's plot: orders and inventory requests per second, and the breaker.

matplotlib types most keyword arguments as unknown, which strict pyright
reports on every call: that one check is off in this module only.
"""

# pyright: reportUnknownMemberType=false

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

BIN = 0.5  # seconds


def plot(
    path: Path,
    *,
    duration: float,
    outage: tuple[float, float],
    orders: Sequence[tuple[float, float, int]],
    attempts: Sequence[float],
    transitions: Sequence[tuple[float, str]],
) -> None:
    """Write the plot to `path` (PNG).

    Args:
        path: Where to write it.
        duration: Seconds the load ran.
        outage: When the inventory was down, seconds into the run.
        orders: ``(sent at, seconds taken, status)`` of each order.
        attempts: When each inventory request arrived.
        transitions: ``(when, new state)`` of the inventory's breaker.
    """
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    bins = [BIN * n for n in range(math.ceil(duration / BIN) + 1)]
    figure, axes = plt.subplots(figsize=(9, 4))

    def weights(times: Sequence[float]) -> list[float]:
        return [1 / BIN] * len(times)

    sent = [at for at, _, _ in orders]
    failed = [at for at, _, status in orders if status >= 500]
    axes.hist(
        sent, bins=bins, weights=weights(sent), alpha=0.5, label="orders (logical)"
    )
    axes.hist(
        attempts,
        bins=bins,
        weights=weights(attempts),
        histtype="step",
        linewidth=2,
        label="inventory requests (physical)",
    )
    axes.hist(failed, bins=bins, weights=weights(failed), alpha=0.6, label="5xx")
    opened: float | None = None
    for at, state in [*transitions, (duration, "closed")]:
        if state == "open" and opened is None:
            opened = at
        elif state != "open" and opened is not None:
            axes.axvspan(opened, at, color="red", alpha=0.1)
            opened = None
    axes.axvspan(*outage, fill=False, hatch="//", edgecolor="grey", label="outage")
    axes.set_xlabel("seconds into the run (red: breaker open)")
    axes.set_ylabel("per second")
    axes.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
