"""tools/copy_primitives.py: each package's `_primitives/` mirrors tools/primitives/."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from pathlib import Path

import pytest

import http_resilience
import http_resilience.testing
import mediator_resilience
import mediator_resilience.testing
from http_resilience._primitives import clock as http_clock
from mediator_resilience._primitives import clock as mediator_clock
from tools.copy_primitives import CANONICAL, MIRRORS, ROOT, files, main, problems, write

FAKE_CLOCKS = [
    pytest.param(http_resilience.testing.FakeClock, id="http_resilience"),
    pytest.param(mediator_resilience.testing.FakeClock, id="mediator_resilience"),
]


def test_every_mirror_is_exact() -> None:
    assert main(["--check"]) == 0
    canonical = ROOT / CANONICAL
    assert {"__init__.py", "backoff.py", "clock.py", "config.py"} <= files(canonical)
    for mirror in MIRRORS:
        assert files(ROOT / mirror) == files(canonical)
        for name in files(canonical):
            data = (canonical / name).read_bytes()
            assert (ROOT / mirror / name).read_bytes() == data, name


def test_each_package_keeps_a_mirror() -> None:
    assert sorted(Path(mirror).parts[0] for mirror in MIRRORS) == [
        "http_resilience",
        "mediator",
        "mediator_resilience",
    ]
    assert all(mirror.endswith("/_primitives") for mirror in MIRRORS)


def a_tree(root: Path) -> Path:
    """A work tree with two primitives and an exact mirror in every package."""
    canonical = root / CANONICAL
    canonical.mkdir(parents=True)
    (canonical / "__init__.py").write_text('"""Primitives."""\n', encoding="utf-8")
    (canonical / "clock.py").write_text("NOW = 0\n", encoding="utf-8")
    assert main([], root=root) == 0
    return root


def test_writing_mirrors_every_file_byte_for_byte(tmp_path: Path) -> None:
    root = a_tree(tmp_path)
    for mirror in MIRRORS:
        assert (root / mirror / "clock.py").read_text(encoding="utf-8") == "NOW = 0\n"
        assert files(root / mirror) == {"__init__.py", "clock.py"}
    assert main(["--check"], root=root) == 0


def test_a_differing_copy_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = a_tree(tmp_path)
    copy = root / MIRRORS[0] / "clock.py"
    copy.write_text("NOW = 1\n", encoding="utf-8")
    capsys.readouterr()

    assert main(["--check"], root=root) == 1
    assert f"{MIRRORS[0]}/clock.py differs from {CANONICAL}/clock.py" in (
        capsys.readouterr().out
    )
    assert copy.read_text(encoding="utf-8") == "NOW = 1\n"  # --check writes nothing


def test_a_missing_file_fails_the_check(tmp_path: Path) -> None:
    root = a_tree(tmp_path)
    (root / MIRRORS[1] / "clock.py").unlink()
    assert problems(root / CANONICAL, root / MIRRORS[1], label="m") == [
        "m/clock.py is missing"
    ]
    assert main(["--check"], root=root) == 1


def test_an_extra_file_fails_the_check_and_writing_removes_it(tmp_path: Path) -> None:
    root = a_tree(tmp_path)
    extra = root / MIRRORS[2] / "hand_written.py"
    extra.write_text("X = 1\n", encoding="utf-8")
    assert problems(root / CANONICAL, root / MIRRORS[2], label="m") == [
        f"m/hand_written.py is extra: no file of {CANONICAL} has its name"
    ]
    assert main(["--check"], root=root) == 1

    assert write(root / CANONICAL, root / MIRRORS[2]) == [f"removed {extra}"]
    assert main(["--check"], root=root) == 0


def test_a_new_primitive_is_missing_everywhere_until_written(tmp_path: Path) -> None:
    root = a_tree(tmp_path)
    (root / CANONICAL / "backoff.py").write_text("BASE = 1\n", encoding="utf-8")
    assert main(["--check"], root=root) == 1
    assert main([], root=root) == 0
    assert main(["--check"], root=root) == 0


def test_bytecode_caches_are_not_files_of_a_mirror(tmp_path: Path) -> None:
    root = a_tree(tmp_path)
    cache = root / MIRRORS[0] / "__pycache__"
    cache.mkdir()
    (cache / "clock.cpython-311.pyc").write_bytes(b"\0")
    assert main(["--check"], root=root) == 0


def test_both_packages_have_one_clock_api() -> None:
    # The public names carry their public module (`__module__`), so the source
    # is read from the mirrors that define them.
    assert http_resilience.testing.FakeClock is http_clock.FakeClock
    assert mediator_resilience.testing.FakeClock is mediator_clock.FakeClock
    for name in ("Clock", "SystemClock"):
        assert getattr(http_resilience, name) is getattr(http_clock, name)
        assert getattr(mediator_resilience, name) is getattr(mediator_clock, name)
    assert inspect.getsource(http_clock) == inspect.getsource(mediator_clock)


@pytest.mark.parametrize("fake_clock", FAKE_CLOCKS)
def test_the_fake_clock_api(
    fake_clock: type[http_resilience.testing.FakeClock],
) -> None:
    clock = fake_clock(5)
    clock.sleep_sync(0.5)
    asyncio.run(clock.sleep(0.25))
    clock.advance(timedelta(seconds=1))
    clock.advance(1)
    assert clock.now == clock.monotonic() == 7.75
    assert clock.sleeps == [0.5, 0.25]
    clock.sleeps.clear()  # a copy: the record stays
    assert clock.sleeps == [0.5, 0.25]
    clock.clear_sleeps()
    assert clock.sleeps == []
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)
    assert isinstance(clock, http_resilience.Clock)
    assert isinstance(clock, mediator_resilience.Clock)
