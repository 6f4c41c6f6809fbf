"""Import cost of `mediator_resilience`, with `mediator` already imported.

Each figure is the best of several fresh interpreters. tenacity is imported by
the first retry, not by the package (issue 12); the second line shows what that
first retry pays for it. It only reports: it never fails on a timing.
"""

from __future__ import annotations

import subprocess
import sys

RUNS = 9

_PROBE = """
import sys, time
import mediator
started = time.perf_counter()
import mediator_resilience
package = time.perf_counter() - started
loaded = "tenacity" in sys.modules
started = time.perf_counter()
import tenacity
print(package * 1000, (time.perf_counter() - started) * 1000, loaded)
"""


def main() -> None:
    runs: list[tuple[float, float, bool]] = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
        ).stdout.split()
        runs.append((float(out[0]), float(out[1]), out[2] == "True"))
    package = min(run[0] for run in runs)
    tenacity = min(run[1] for run in runs)
    loaded = any(run[2] for run in runs)
    print(
        f"import mediator_resilience (mediator already imported): {package:.1f} ms, "
        f"tenacity {'imported with it' if loaded else 'not imported'}"
    )
    print(f"import tenacity, at the first retry: {tenacity:.1f} ms")


if __name__ == "__main__":
    main()
