"""`make mutation`: mutmut over the pure logic, in a time box, then the kill rates.

Run from the repository root with the Python of the mutation environment (the
Makefile's `.venv-mutation`, which has mutmut). It lays out the stage
``build/mutation`` afresh: links to each member's package under ``src/`` (mutmut
names a mutant after its file's path, and the name must be the import path), to
``tests/`` and to ``pyproject.toml``, whose ``[tool.mutmut]`` lists the files to
mutate and the tests to run. Then it runs ``mutmut run`` there on the functions in
scope, stops it when the time box runs out, and prints killed, timeout, survived
and total per module with the kill rate.

The kill rate is (killed + timeout) / checked, as mutmut's own score counts it: a
mutant that makes the tests hang is caught. A mutant no selected test reaches
("no tests") counts as checked and not caught.

Usage: ``python tools/mutation.py [--time-box SECONDS]``. Exit status 0 when every
mutant in scope was checked, 1 when the box ran out or mutmut failed.

Survivors no test can catch (equivalent mutants), left in the figures rather than
hidden with pragmas, which would hide the line's other mutants too:

- the arguments of ``typing.cast``, which does nothing at run time;
- `CircuitBreaker.__init__` values that every path sets before it reads them
  (``_open_until``, ``_bucket``, ``_failures``), ``_probing = None`` for ``False``,
  and `_slide`'s ``steps <= 0`` and ``steps >= WINDOW_BUCKETS`` at their bounds,
  where the loop does what the early returns do;
- header names in another case: httpx looks headers up in any case;
- ``or Stage(0)`` in the chain's sort key, never reached: under ``use_defaults()``
  every behavior has a `Stage`, and a behavior without one was refused; for the
  same reason, keeping a ``stage`` that is no `Stage` matters only to a
  hand-wired chain, which is never sorted.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "mutation"
PACKAGES = {
    "mediator": "mediator/src/mediator",
    "mediator_resilience": "mediator_resilience/src/mediator_resilience",
    "http_resilience": "http_resilience/src/http_resilience",
}
MUTMUT = Path(sys.executable).parent / "mutmut"  # beside this environment's Python
SEPARATOR = "\N{LATIN LETTER LATERAL CLICK}"  # mutmut's class separator: xǁClassǁmethod

# Modules listed in [tool.mutmut] only_mutate whose pure logic is only part of the
# file: just these functions are tested (mutmut's mangled names, globs allowed).
NARROWED: Mapping[str, Sequence[str]] = {
    # The stage ordering; the rest of the module compiles routes.
    "mediator._dispatch.compiler": ("x_compile_behaviors",),
    # The arithmetic; beside it only the three names of an entry.
    "http_resilience._strategies.concurrency.limit": (
        f"x{SEPARATOR}ConcurrencyLimit{SEPARATOR}*",
    ),
    # The state machine; beside it only its no-op listener.
    "http_resilience._strategies.breaker.state": (
        f"x{SEPARATOR}CircuitBreaker{SEPARATOR}*",
    ),
}

CAUGHT = ("killed", "timeout")
NOT_CHECKED = ("not checked", "skipped", "check was interrupted by user")
GRACE_SECONDS = 60
MUTANT_LISTING = b"\nMutant results\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Lay out the stage, run mutmut in the time box, and print the report."""
    parser = argparse.ArgumentParser(description="mutmut over the pure logic")
    parser.add_argument(
        "--time-box",
        type=float,
        default=1200.0,
        help="seconds mutmut may run before it is stopped (default 1200)",
    )
    args = parser.parse_args(argv)

    modules = mutated_modules(ROOT / "pyproject.toml")
    patterns = mutant_patterns(modules)
    lay_out_stage()
    print(f"mutmut run on {len(patterns)} scopes in {STAGE.relative_to(ROOT)}")
    returncode, timed_out = run_in_box([str(MUTMUT), "run", *patterns], args.time_box)

    listing = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"],
        cwd=STAGE,
        capture_output=True,
        text=True,
        check=False,
    )
    statuses = in_scope(parse_results(listing.stdout), patterns)
    print()
    print(report(statuses, modules))
    checked = sum(1 for status in statuses.values() if status not in NOT_CHECKED)
    if timed_out:
        print(
            f"\nINCOMPLETE: the time box of {args.time_box:.0f} s ran out with "
            f"{checked} of {len(statuses)} mutants checked; the rates above cover "
            "those only. Give it longer: make mutation MUTATION_TIME_BOX=<seconds>"
        )
        return 1
    if returncode != 0:
        print(f"\nmutmut failed (exit status {returncode}); see its output above")
        return 1
    if checked < len(statuses):
        print(f"\nINCOMPLETE: {len(statuses) - checked} mutants were not checked")
        return 1
    return 0


def mutated_modules(pyproject: Path) -> list[str]:
    """The dotted names of the files [tool.mutmut] only_mutate lists."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    paths: list[str] = config["tool"]["mutmut"]["only_mutate"]
    return [
        path.removeprefix("src/").removesuffix(".py").replace("/", ".")
        for path in paths
    ]


def mutant_patterns(modules: Iterable[str]) -> list[str]:
    """The arguments of `mutmut run`: all mutants of a module, or of its functions."""
    return [
        f"{module}.{function}__mutmut_*"
        for module in modules
        for function in NARROWED.get(module, ("*",))
    ]


def lay_out_stage() -> None:
    """Make build/mutation afresh: mutmut's results carry over stale otherwise."""
    shutil.rmtree(STAGE, ignore_errors=True)
    (STAGE / "src").mkdir(parents=True)
    links = {"pyproject.toml": "pyproject.toml", "tests": "tests"}
    links |= {f"src/{name}": path for name, path in PACKAGES.items()}
    for link, target in links.items():
        place = STAGE / link
        place.symlink_to(os.path.relpath(ROOT / target, place.parent))


def run_in_box(command: Sequence[str], seconds: float) -> tuple[int, bool]:
    """Run `command` in the stage; at the end of the box interrupt it, as ^C would.

    Returns its exit status and whether the box ran out. mutmut's workers are
    forked into its process group, so the interrupt goes to the whole group.
    """
    process = subprocess.Popen(
        command,
        cwd=STAGE,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    echo = threading.Thread(target=echo_progress, args=(process.stdout,))
    echo.start()
    try:
        return process.wait(timeout=seconds), False
    except subprocess.TimeoutExpired:
        print(f"\nThe time box of {seconds:.0f} s ran out: stopping mutmut")
        os.killpg(process.pid, signal.SIGINT)
        try:
            return process.wait(timeout=GRACE_SECONDS), True
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait(), True
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        echo.join()


def echo_progress(output: IO[bytes]) -> None:
    """Pass mutmut's progress on, up to the list of every mutant it ends with.

    Given mutant names, mutmut closes with one line per mutant, killed ones
    included; the report prints the ones that matter.
    """
    shown = sys.stdout.buffer
    # Into a file or a pipe, a spinner redrawn with carriage returns is a wall
    # of frames: there each line keeps only its last frame.
    terminal = sys.stdout.isatty()
    write = shown.write if terminal else _last_frames(shown.write)
    keep = len(MUTANT_LISTING) - 1
    pending = b""
    quiet = False
    while chunk := os.read(output.fileno(), 65536):
        if quiet:
            continue
        pending += chunk
        cut = pending.find(MUTANT_LISTING)
        if cut >= 0:
            write(pending[: cut + 1])
            quiet = True
        elif len(pending) > keep:
            write(pending[:-keep])
            pending = pending[-keep:]
        shown.flush()
    if not quiet:
        write(pending if terminal else pending + b"\n")
        shown.flush()


def _last_frames(write: Callable[[bytes], object]) -> Callable[[bytes], None]:
    """A writer that holds each line until it ends, then writes its last frame."""
    held = b""

    def frames(data: bytes) -> None:
        nonlocal held
        held += data
        *lines, held = held.split(b"\n")
        for line in lines:
            write(line.rsplit(b"\r", 1)[-1] + b"\n")

    return frames


def parse_results(listing: str) -> dict[str, str]:
    """Mutant name to status, from ``mutmut results --all true``."""
    statuses: dict[str, str] = {}
    for line in listing.splitlines():
        name, colon, status = line.strip().rpartition(": ")
        if colon and "__mutmut_" in name:
            statuses[name] = status
    return statuses


def in_scope(statuses: Mapping[str, str], patterns: Sequence[str]) -> dict[str, str]:
    """The statuses of the mutants `patterns` match, the ones mutmut ran."""
    return {
        name: status
        for name, status in statuses.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }


def module_of(mutant: str) -> str:
    """``http_resilience._breaker`` of ``http_resilience._breaker.xǁ...__mutmut_3``."""
    return mutant.partition("__mutmut_")[0].rpartition(".")[0]


def report(statuses: Mapping[str, str], modules: Sequence[str]) -> str:
    """The table of counts and kill rates per module and overall, and survivors."""
    counts = {module: Counter[str]() for module in modules}
    for name, status in statuses.items():
        counts.setdefault(module_of(name), Counter())[status] += 1
    header = ("module", "killed", "timeout", "survived", "other", "total", "rate")
    rows: list[tuple[str, ...]] = [header]
    overall = Counter[str]()
    for module, count in counts.items():
        rows.append(row(module, count))
        overall.update(count)
    rows.append(row("all", overall))
    width = max(len(name) for name, *_ in rows)
    lines = [
        f"{name:<{width}}" + "".join(f"{cell:>10}" for cell in cells)
        for name, *cells in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    lines.append(
        "rate = (killed + timeout) / checked; other = no tests, suspicious, "
        "segfault; unchecked mutants are in total only"
    )
    missed = sorted(
        name for name, status in statuses.items() if status not in CAUGHT + NOT_CHECKED
    )
    if missed:
        show = os.path.relpath(MUTMUT, STAGE)
        lines.append(f"\nNot caught ({len(missed)}); to see one:")
        lines.append(f"  cd {STAGE.relative_to(ROOT)} && {show} show NAME")
        lines.extend(f"  {name}: {statuses[name]}" for name in missed)
    return "\n".join(lines)


def row(name: str, count: Counter[str]) -> tuple[str, ...]:
    """One line of the table: the counts of `count` and its kill rate."""
    caught = sum(count[status] for status in CAUGHT)
    unchecked = sum(count[status] for status in NOT_CHECKED)
    total = sum(count.values())
    checked = total - unchecked
    other = checked - caught - count["survived"]
    rate = f"{100 * caught / checked:.1f}%" if checked else "-"
    cells = (count["killed"], count["timeout"], count["survived"], other, total)
    return (name, *map(str, cells), rate)


if __name__ == "__main__":
    sys.exit(main())
