"""tools/layers/mediator.ini: mediator's layers and independent behaviors hold.

Each check is also shown to bite, on a copy of the configuration that asks for
something the tree does not do.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tools" / "layers" / "mediator.ini"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def run_contracts(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert old in text
    config = tmp_path / "variant.ini"
    config.write_text(text.replace(old, new), encoding="utf-8")
    return config


def test_every_contract_is_kept() -> None:
    result = run_contracts(CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_core_above_the_behaviors_is_reported(tmp_path: Path) -> None:
    swapped = "\n    _core\n    _behaviors\n"
    config = variant(tmp_path, "\n    _behaviors\n    _core\n", swapped)
    result = run_contracts(config)
    assert result.returncode == 1
    assert "is not allowed to import mediator._core" in result.stdout


def test_a_module_that_imports_a_behavior_is_not_independent_of_it(
    tmp_path: Path,
) -> None:
    # The dispatch checks the behaviors' requirements, so it imports them.
    listed = "    mediator._behaviors.validation\n"
    config = variant(tmp_path, listed, listed + "    mediator._dispatch\n")
    result = run_contracts(config)
    assert result.returncode == 1
    assert "mediator: no built-in behavior imports another BROKEN" in result.stdout
