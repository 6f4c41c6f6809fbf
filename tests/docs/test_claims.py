"""The READMEs and the docs name only what exists.

A distribution, an extra or a page named in the prose must be one the workspace
really has: the published name of a member, an extra its pyproject.toml
declares, a page in the mkdocs navigation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.closure._workspace import BY_DISTRIBUTION, MEMBER_IDS, MEMBERS, Member

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"

PROSE = [
    README,
    *sorted(DOCS.glob("*.md")),
    *(member.path / "README.md" for member in MEMBERS),
]
PROSE_IDS = [str(path.relative_to(REPO_ROOT)) for path in PROSE]

# `name[extra]` in backticks, as a user would type it after `pip install`.
_WITH_EXTRA = re.compile(r"`(?P<name>[A-Za-z0-9_.-]+)\[(?P<extras>[a-z0-9_,-]+)\]`")
# The names ours are (or were) published under; any other is a third party's.
_OURS = re.compile(r"mediator|resilience")


def _nav_pages() -> list[str]:
    """The pages of mkdocs.yml's `nav:` list (`  - Title: page.md` lines)."""
    text = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\s*- [^:]+: (\S+\.md)$", nav, flags=re.MULTILINE)


@pytest.mark.parametrize("path", PROSE, ids=PROSE_IDS)
def test_every_distribution_with_extras_is_a_member_with_those_extras(
    path: Path,
) -> None:
    problems: list[str] = []
    for found in _WITH_EXTRA.finditer(path.read_text(encoding="utf-8")):
        name = canonicalize_name(found["name"])
        if not _OURS.search(name):
            continue  # a third-party package, such as a database driver
        member = BY_DISTRIBUTION.get(name)
        if member is None:
            problems.append(f"{found[0]}: no distribution is called {found['name']}")
            continue
        declared = set(member.extras())
        problems += [
            f"{found[0]}: {member.name} has no extra [{extra}] "
            f"(it has {sorted(declared)})"
            for extra in found["extras"].split(",")
            if extra not in declared
        ]
    assert problems == []


def _readme_rows() -> dict[str, str]:
    """The README's table of distributions: name -> the 'depends on' cell."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The three distributions", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[3]
    return rows


def test_the_readme_table_names_each_member_by_its_published_name() -> None:
    assert sorted(_readme_rows()) == sorted(member.name for member in MEMBERS)


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_the_readme_table_names_only_declared_extras(member: Member) -> None:
    cell = _readme_rows().get(member.name, "")
    named: set[str] = set()
    for clause in re.findall(r"extras? ([^;:)]*)", cell):
        named.update(re.findall(r"`([a-z0-9_-]+)`", clause))
    assert named <= set(member.extras()), (
        f"the README says {member.name} has extras {sorted(named)}; "
        f"its pyproject.toml declares {sorted(member.extras())}"
    )


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_each_long_description_is_titled_with_its_published_name(
    member: Member,
) -> None:
    first = (member.path / "README.md").read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# {member.name}"


def test_the_home_page_lists_every_page_of_the_navigation() -> None:
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = home.split("## Pages", 1)[1]
    linked = set(re.findall(r"\]\(([a-z0-9-]+\.md)[#)]", pages))
    missing = [
        page for page in _nav_pages() if page != "index.md" and page not in linked
    ]
    assert missing == [], f"docs/index.md's page list leaves out {missing}"


def test_the_navigation_holds_every_page() -> None:
    on_disk = sorted(path.name for path in DOCS.glob("*.md"))
    assert sorted(_nav_pages()) == on_disk
