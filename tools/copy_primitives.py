"""Mirror tools/primitives/ into the `_primitives/` folder of every package.

The closure rules keep the packages from importing each other, so what each
needs alike (the clock, durations, the backoff, configuration reading, the
testing switch, the `EventRecorder`, the web stack's order, the WSGI context)
lives once in tools/primitives/ and is mirrored, byte for byte and file for
file, into each package's `_primitives/`. `--check` (run by `make lint`) exits
1 when a copy differs, or when a file is missing from a mirror or extra in it.

Usage::

    python tools/copy_primitives.py          # write every mirror
    python tools/copy_primitives.py --check  # exit 1 if a mirror is not exact
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANONICAL = "tools/primitives"
MIRRORS: tuple[str, ...] = (
    "http_resilience/src/http_resilience/_primitives",
    "mediator/src/mediator/_primitives",
    "mediator_resilience/src/mediator_resilience/_primitives",
)
"""Every package's `_primitives/`, from the root of the work tree."""


def files(folder: Path) -> set[str]:
    """The files under `folder`, relative, bytecode caches left out."""
    if not folder.is_dir():
        return set()
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def problems(canonical: Path, mirror: Path, *, label: str | None = None) -> list[str]:
    """How `mirror` is not an exact copy of `canonical`: one line per file, sorted.

    A file is differing (other bytes), missing (in `canonical` only) or extra
    (in `mirror` only). `label` names the mirror in the lines; its path when
    not given.
    """
    name = str(mirror) if label is None else label
    wanted, present = files(canonical), files(mirror)
    found: list[str] = []
    for file in sorted(wanted | present):
        if file not in present:
            found.append(f"{name}/{file} is missing")
        elif file not in wanted:
            found.append(f"{name}/{file} is extra: no file of {CANONICAL} has its name")
        elif (canonical / file).read_bytes() != (mirror / file).read_bytes():
            found.append(f"{name}/{file} differs from {CANONICAL}/{file}")
    return found


def write(canonical: Path, mirror: Path) -> list[str]:
    """Make `mirror` an exact copy of `canonical`; the files written or removed."""
    changed: list[str] = []
    wanted, present = files(canonical), files(mirror)
    for file in sorted(wanted):
        source, target = canonical / file, mirror / file
        data = source.read_bytes()
        if file in present and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        changed.append(f"wrote {target}")
    for file in sorted(present - wanted):
        (mirror / file).unlink()
        changed.append(f"removed {mirror / file}")
    return changed


def main(argv: Sequence[str] | None = None, *, root: Path = ROOT) -> int:
    """Write (or `--check`) every mirror under `root`; 1 when one is not exact."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only say which mirrors are not exact"
    )
    arguments = parser.parse_args(argv)
    canonical = root / CANONICAL
    found: list[str] = []
    for mirror in MIRRORS:
        if arguments.check:
            found += problems(canonical, root / mirror, label=mirror)
        else:
            for line in write(canonical, root / mirror):
                print(line)
    for line in found:
        print(line)
    if found:
        print("run tools/copy_primitives.py, which writes every mirror")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
