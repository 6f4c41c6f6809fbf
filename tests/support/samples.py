"""Running a sample program the way a user does, for the tests that check it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["assert_prints", "run_sample"]

TIMEOUT = 30  # seconds


def run_sample(
    main: Path, cwd: Path, temporary: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `main` in `cwd` with the interpreter running the tests (the workspace).

    ``-W error``: a warning in a sample is a failure, as in the test suite.
    `temporary`, when given, is the sample's TMPDIR.
    """
    env = dict(os.environ)
    if temporary is not None:
        env["TMPDIR"] = str(temporary)
    return subprocess.run(
        [sys.executable, "-W", "error", str(main)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def assert_prints(result: subprocess.CompletedProcess[str], expected: str) -> None:
    """The sample ended well, printed nothing on stderr, and `expected` on stdout."""
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == expected.splitlines()
