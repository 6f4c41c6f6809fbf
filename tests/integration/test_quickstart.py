"""The quickstart runs as a user runs it: a script, in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "samples" / "quickstart" / "main.py"

EXPECTED = """\
1. send a command: PlaceOrder
   [log] PlaceOrder: start
   unit of work 1 committed: reserve 3 x apple, reserve 2 x pear, save order 1
   [log] PlaceOrder: done
   placed order 1
2. send a query: GetOrder
   [log] GetOrder: start
   [log] GetOrder: done
   order 1 for alice: 3 x apple, 2 x pear, total 3.10
3. publish a notification: OrderPlaced
   [log] OrderPlaced: start
   email to alice: your order 1 is confirmed
   sales ledger: 1 order(s), 3.10 in revenue
   [log] OrderPlaced: done
4. stream: OrderLines
   3 x apple at 0.70 = 2.10
   2 x pear at 0.50 = 1.00
5. a domain error: PlaceOrder for more plums than there are
   [log] PlaceOrder: start
   [log] PlaceOrder: failed with BusinessRuleError
   refused (BusinessRuleError): only 0 x plum in stock, 1 ordered
"""


def run_quickstart(cwd: Path) -> subprocess.CompletedProcess[str]:
    # sys.executable is the interpreter running the tests: the workspace venv.
    # -W error: a warning in the demo is a failure, as in the test suite.
    return subprocess.run(
        [sys.executable, "-W", "error", str(MAIN)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_quickstart_prints_every_step(where: str, tmp_path: Path) -> None:
    cwd = ROOT if where == "repository root" else tmp_path
    result = run_quickstart(cwd)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == EXPECTED.splitlines()
