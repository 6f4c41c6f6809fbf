"""The closure tests' fixtures: uv, and the wheels built once a session.

Under pytest-xdist every closure test runs on one worker (``--dist
loadgroup``), so the wheels are built once, not once per worker.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.utils import NormalizedName, parse_sdist_filename, parse_wheel_filename

from tests.support.missing import missing

from ._process import run
from ._workspace import BY_DISTRIBUTION, MEMBER_IDS, REPO_ROOT, Built

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("closure"))


@pytest.fixture(scope="session")
def uv() -> Path:
    """The uv the Makefile bootstrapped into .tools/, else the one on PATH."""
    bootstrapped = REPO_ROOT / ".tools" / "bin" / "uv"
    if bootstrapped.is_file():
        return bootstrapped
    on_path = shutil.which("uv")
    if on_path is not None:
        return Path(on_path)
    missing(
        "uv is neither at .tools/bin/uv nor on PATH",
        remedy="run `make venv` first",
    )


@pytest.fixture(scope="session")
def built(uv: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One wheel and one sdist per member, built once per session.

    uv builds each sdist first and the wheel from it, so a file the sdist
    leaves out breaks the wheel too.
    """
    out = tmp_path_factory.mktemp("dist")
    run(uv, "build", "--all-packages", "--out-dir", out, cwd=REPO_ROOT)
    wheels: dict[NormalizedName, Path] = {}
    sdists: dict[NormalizedName, Path] = {}
    for path in sorted(out.iterdir()):
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
            found = wheels
        elif path.name.endswith(".tar.gz"):
            name, version = parse_sdist_filename(path.name)
            found = sdists
        else:
            continue  # uv's own .gitignore in the output folder
        assert name not in found, f"two of {name}: {path.name}"
        assert name in BY_DISTRIBUTION, f"built {path.name}, which is no member"
        assert version == BY_DISTRIBUTION[name].version(), path.name
        found[name] = path
    assert sorted(wheels) == sorted(MEMBER_IDS)
    assert sorted(sdists) == sorted(MEMBER_IDS)
    index = tmp_path_factory.mktemp("wheel-index")
    for wheel in wheels.values():
        shutil.copy2(wheel, index)
    return Built(index, wheels, sdists)
