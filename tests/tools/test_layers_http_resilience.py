"""tools/layers/http_resilience.ini: the package's layers hold, and the check bites."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tools" / "layers" / "http_resilience.ini"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )


def test_every_contract_is_kept() -> None:
    result = lint(CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_a_layer_out_of_order_is_reported(tmp_path: Path) -> None:
    text = CONFIG.read_text(encoding="utf-8")
    core, strategies = "\n    _core\n", "\n    _strategies | _streams\n"
    assert core in text
    assert strategies in text
    swapped = text.replace(strategies, "\n    @\n").replace(core, strategies)
    config = tmp_path / "swapped.ini"
    config.write_text(swapped.replace("\n    @\n", core), encoding="utf-8")
    result = lint(config)
    assert result.returncode == 1
    assert "http_resilience._core is not allowed to import" not in result.stdout
    assert "is not allowed to import http_resilience._core" in result.stdout
