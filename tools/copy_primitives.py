"""Copy each primitive in tools/primitives/ into every package that keeps one.

The closure rules keep the packages from importing each other, so the clock
(`Clock`, `SystemClock`, `FakeClock`), the duration parsing, the testing
switch (`set_testing`) and the `EventRecorder` live once here and are copied,
a header added, into each package. `--check` (run by `make lint`) exits 1 when
a copy is not what this script would write.

Usage::

    python tools/copy_primitives.py          # write every copy
    python tools/copy_primitives.py --check  # exit 1 if a copy is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANONICAL = "tools/primitives"

_HTTP = "http_resilience/src/http_resilience"
_MEDIATOR_RESILIENCE = "mediator_resilience/src/mediator_resilience"

COPIES: Mapping[str, Sequence[str]] = {
    "clock.py": (
        f"{_HTTP}/_core/shared_clock.py",
        f"{_MEDIATOR_RESILIENCE}/_clock.py",
    ),
    "durations.py": (
        f"{_HTTP}/_core/durations.py",
        f"{_MEDIATOR_RESILIENCE}/_durations.py",
    ),
    "testing_mode.py": (
        f"{_HTTP}/_core/testing_mode.py",
        f"{_MEDIATOR_RESILIENCE}/_testing_mode.py",
    ),
    "recorder.py": (
        f"{_HTTP}/_core/recorder.py",
        f"{_MEDIATOR_RESILIENCE}/_recorder.py",
    ),
    "config_sections.py": (
        f"{_HTTP}/_core/config_sections.py",
        f"{_MEDIATOR_RESILIENCE}/_config_sections.py",
    ),
    "stack_order.py": (
        f"{_HTTP}/_transports/_stack_order.py",
        "mediator/src/mediator/_asgi/_stack_order.py",
    ),
    "wsgi_context.py": (
        f"{_HTTP}/_transports/wsgi_in_context.py",
        "mediator/src/mediator/_wsgi/in_context.py",
    ),
}


def expected(name: str) -> str:
    """The text every copy of `tools/primitives/<name>` has."""
    source = (ROOT / CANONICAL / name).read_text(encoding="utf-8")
    header = (
        f"# A copy of {CANONICAL}/{name}; do not edit. Edit that file and\n"
        "# run `python tools/copy_primitives.py`, which writes every copy.\n"
    )
    return header + source


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or `--check`) every copy; 1 when one is stale."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only say which copies are stale"
    )
    arguments = parser.parse_args(argv)
    stale: list[str] = []
    for name, targets in COPIES.items():
        text = expected(name)
        for target in targets:
            path = ROOT / target
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == text:
                continue
            if arguments.check:
                stale.append(target)
            else:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {target}")
    for target in stale:
        print(f"{target} is not a copy of its primitive; run tools/copy_primitives.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
