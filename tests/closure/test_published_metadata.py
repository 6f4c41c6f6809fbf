"""What the public index would show for each distribution, checked before upload.

The wheels and sdists are built as `make` would upload them; `twine check
--strict` reads their metadata and renders their long description the way the
index does, and the tests below pin what every page must carry: the published
name, a summary, the Python versions, the licence and its text, classifiers, and
the member's README as the description.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ._process import run
from ._workspace import MEMBER_IDS, MEMBERS, REPO_ROOT, Built, Member

pytestmark = [pytest.mark.closure, pytest.mark.timeout(300)]

LICENSE = REPO_ROOT / "LICENSE"


def _wheel_metadata(built: Built, member: Member) -> tuple[Message, bytes | None]:
    """The wheel's METADATA headers and description, and the licence it ships."""
    dist_info = f"{member.file_stem}-{member.version()}.dist-info"
    with zipfile.ZipFile(built.wheels[member.distribution]) as wheel:
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        names = set(wheel.namelist())
        licence_path = f"{dist_info}/licenses/LICENSE"
        licence = wheel.read(licence_path) if licence_path in names else None
    return HeaderParser().parsestr(metadata), licence


def test_twine_check_strict_passes_for_every_wheel_and_sdist(built: Built) -> None:
    files = sorted([*built.wheels.values(), *built.sdists.values()])
    output = run(
        sys.executable, "-m", "twine", "check", "--strict", *files, cwd=REPO_ROOT
    )
    assert output.count("PASSED") == len(files), output


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_wheel_metadata_is_complete(member: Member, built: Built) -> None:
    metadata, _ = _wheel_metadata(built, member)
    project = member.project()

    assert metadata["Name"] == member.name
    assert metadata["Summary"] == project["description"]
    assert metadata["Requires-Python"] == project["requires-python"]
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    readme = (member.path / "README.md").read_text(encoding="utf-8")
    description = metadata.get_payload()
    assert isinstance(description, str)
    assert description.strip() == readme.strip()
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert metadata.get_all("Keywords"), "no keywords"


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_python_classifiers_agree_with_requires_python(
    member: Member, built: Built
) -> None:
    metadata, _ = _wheel_metadata(built, member)
    supported = SpecifierSet(metadata["Requires-Python"])
    prefix = "Programming Language :: Python :: 3."
    versions = [
        text.removeprefix("Programming Language :: Python :: ")
        for text in metadata.get_all("Classifier") or []
        if text.startswith(prefix) and text.removeprefix(prefix).isdigit()
    ]
    assert versions, "no Python version classifier"
    assert [v for v in versions if v not in supported] == []
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert running in supported


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_wheel_and_sdist_ship_the_project_licence(member: Member, built: Built) -> None:
    _, licence = _wheel_metadata(built, member)
    expected = LICENSE.read_bytes()
    assert licence == expected, f"the {member.name} wheel ships another licence"
    root = f"{member.file_stem}-{member.version()}"
    with tarfile.open(built.sdists[member.distribution]) as sdist:
        shipped = sdist.extractfile(f"{root}/LICENSE")
        assert shipped is not None
        assert shipped.read() == expected, f"the {member.name} sdist differs"


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_sdist_holds_the_member_and_nothing_of_the_workspace(
    member: Member, built: Built
) -> None:
    root = f"{member.file_stem}-{member.version()}"
    with tarfile.open(built.sdists[member.distribution]) as sdist:
        names = sdist.getnames()
    tops = {Path(name).relative_to(root).parts[0] for name in names if name != root}
    assert tops == {
        ".gitignore",
        "LICENSE",
        "PKG-INFO",
        "README.md",
        "pyproject.toml",
        "src",
    }
    assert f"{root}/src/{member.import_name}/py.typed" in names


def test_each_member_licence_is_the_root_licence() -> None:
    expected = LICENSE.read_bytes()
    differs = [
        m.directory for m in MEMBERS if (m.path / "LICENSE").read_bytes() != expected
    ]
    assert differs == [], f"{differs}/LICENSE differ from the root LICENSE"
