"""Where the chaos and load suites put the figures they measured.

`record("scenario", attempts_max=3, p99_ms=412.0)` appends one JSON line to
``.figures/figures.jsonl`` at the repository root (not committed) and prints
it, so ``pytest -s`` shows it too. `docs/reliability.md` quotes the latest
run. Recording is a report, never an assertion: the tests assert the
invariants themselves.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

__all__ = ["FIGURES", "record"]

FIGURES = Path(__file__).resolve().parents[2] / ".figures" / "figures.jsonl"
_LOCK = threading.Lock()


def record(scenario: str, **values: object) -> None:
    """Append ``{"scenario": scenario, **values}`` as one line of JSON."""
    line = json.dumps({"scenario": scenario, **values}, sort_keys=True, default=str)
    with _LOCK:
        FIGURES.parent.mkdir(exist_ok=True)
        with FIGURES.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
    print(line)
