"""Run a command for a closure test and fail the test, with its output, if it fails."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

# The Makefile exports these for the dev venv; a command aimed at a throw-away
# environment must not be steered back to .venv by them.
_SCRUBBED = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONHOME")


def clean_environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    return env


def run(*args: str | Path, cwd: Path) -> str:
    """Run `args` in `cwd` and return its stdout; a non-zero exit fails the test."""
    argv = [str(arg) for arg in args]
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=clean_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"`{shlex.join(argv)}` exited with {result.returncode}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result.stdout
