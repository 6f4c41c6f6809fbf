"""What each distribution declares is exactly what DESIGN section 1 allows it.

A new runtime dependency changes what every user of that distribution installs, so
it is agreed in DESIGN first and then added to `ALLOWED` below; until then these
tests fail and name it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ._process import run
from ._workspace import (
    BY_DISTRIBUTION,
    FOREIGN_NAMES,
    MEDIATOR,
    MEDIATOR_RESILIENCE,
    MEMBER_IDS,
    MEMBERS,
    REPO_ROOT,
    Member,
    load_toml,
    root_pyproject,
)


@dataclass(frozen=True)
class Allowed:
    """The dependencies one distribution may declare (names as on the index)."""

    required: frozenset[str]
    """Declared by the distribution itself, all of them, always."""
    optional: frozenset[str] = frozenset()
    """May be declared at run time, need not be."""
    extras: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict[str, tuple[str, ...]]
    )
    """Extra name -> glob patterns of the names that extra may require."""
    requirement_extras: Mapping[str, frozenset[str]] = field(
        default_factory=dict[str, frozenset[str]]
    )
    """Name -> extras it may be required with (`pydantic[email]` adds packages)."""


ALLOWED: Mapping[str, Allowed] = {
    "mediator-core": Allowed(
        required=frozenset({"pydantic", "injector"}),
        extras={
            "sqlalchemy": ("sqlalchemy",),
            "otel": ("opentelemetry-*",),
            "redis": ("redis",),
        },
        requirement_extras={"sqlalchemy": frozenset({"asyncio"})},
    ),
    "mediator-resilience": Allowed(
        required=frozenset({"mediator-core", "tenacity", "pydantic"}),
    ),
    "http-resilience": Allowed(
        required=frozenset({"httpx", "pydantic"}),
        optional=frozenset({"tenacity"}),
        extras={
            "injector": ("injector",),
            "otel": ("opentelemetry-*",),
            "redis": ("redis",),
        },
    ),
}

_HOW_TO_CHANGE = (
    "A new dependency changes what every user installs: agree it in DESIGN section 1 "
    "first, then extend ALLOWED in tests/closure/test_declared_requirements.py."
)


def _names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(req.name) for req in requirements}


def test_the_policy_covers_every_workspace_member() -> None:
    declared_members = root_pyproject()["tool"]["uv"]["workspace"]["members"]
    assert sorted(declared_members) == sorted(m.directory for m in MEMBERS), (
        "the workspace members changed: give every member a closure policy in "
        "tests/closure (MEMBERS in _workspace.py, ALLOWED here)"
    )
    for member in MEMBERS:
        name = canonicalize_name(member.project()["name"])
        assert name == member.distribution, f"{member.directory}/ builds {name!r}"
    assert set(ALLOWED) == set(BY_DISTRIBUTION)


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_dependencies_are_read_from_pyproject_not_computed(member: Member) -> None:
    dynamic = set(member.project().get("dynamic", []))
    computed = dynamic & {"dependencies", "optional-dependencies"}
    assert not computed, (
        f"{member.distribution} computes {sorted(computed)} at build time, so its "
        "pyproject.toml no longer says what it depends on"
    )


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_runtime_requirements_are_the_allowed_set(member: Member) -> None:
    allowed = ALLOWED[member.distribution]
    declared = _names(member.requirements())
    unexpected = declared - allowed.required - allowed.optional
    missing = allowed.required - declared
    allowed_text = (
        f"allowed: {sorted(allowed.required)}, optionally {sorted(allowed.optional)}"
    )
    assert not unexpected, (
        f"{member.distribution} declares runtime dependencies outside its closure: "
        f"{sorted(unexpected)} ({allowed_text}).\n{_HOW_TO_CHANGE}"
    )
    assert not missing, (
        f"{member.distribution} no longer declares {sorted(missing)} ({allowed_text}): "
        "if it really does without, update DESIGN section 1 and ALLOWED."
    )


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_extras_are_the_allowed_ones(member: Member) -> None:
    allowed = ALLOWED[member.distribution]
    problems: list[str] = []
    for extra, requirements in member.extras().items():
        patterns = allowed.extras.get(extra)
        if patterns is None:
            problems.append(
                f"extra [{extra}] is not allowed "
                f"(allowed extras: {sorted(allowed.extras) or 'none'})"
            )
            continue
        for name in sorted(_names(requirements)):
            if not any(fnmatchcase(name, pattern) for pattern in patterns):
                problems.append(
                    f"extra [{extra}] requires {name!r}, "
                    f"which is not among {list(patterns)}"
                )
    assert not problems, (
        f"{member.distribution}: " + "; ".join(problems) + f"\n{_HOW_TO_CHANGE}"
    )


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_requirements_ask_for_no_extras_of_their_own(member: Member) -> None:
    allowed = ALLOWED[member.distribution]
    every = member.requirements() + [
        req for requirements in member.extras().values() for req in requirements
    ]
    no_extras = frozenset[str]()
    problems = [
        str(req)
        for req in every
        if req.extras
        - allowed.requirement_extras.get(canonicalize_name(req.name), no_extras)
    ]
    assert not problems, (
        f"{member.distribution} requires {problems}: an extra of a dependency brings "
        f"its own packages into the closure.\n{_HOW_TO_CHANGE}"
    )


# --- the other `mediator` ----------------------------------------------------------
# The name `mediator` on the public index belongs to an unrelated 2017 project
# (releases 0.x, the latest 0.4.0). Our mediator is published as `mediator-core`,
# and nothing of ours may be called, or ask for, the other name.


def test_no_distribution_takes_or_requires_a_foreign_name() -> None:
    problems: list[str] = []
    for member in MEMBERS:
        if member.distribution in FOREIGN_NAMES:
            problems.append(f"{member.directory}/ is published as {member.name!r}")
        every = member.requirements() + [
            req for requirements in member.extras().values() for req in requirements
        ]
        problems += [
            f"{member.distribution} requires {req}"
            for req in every
            if canonicalize_name(req.name) in FOREIGN_NAMES
        ]
    groups: dict[str, list[str | dict[str, str]]] = root_pyproject()[
        "dependency-groups"
    ]
    problems += [
        f"the root's {group} group asks for {text}"
        for group, entries in groups.items()
        for text in entries
        # An entry that is a table includes another group, checked on its own.
        if isinstance(text, str)
        and canonicalize_name(Requirement(text).name) in FOREIGN_NAMES
    ]
    assert not problems, (
        f"{sorted(FOREIGN_NAMES)} belong to unrelated projects on the public index, "
        f"so a resolver would pick theirs: {problems}; the mediator's distribution "
        f"is {MEDIATOR.name!r}"
    )


def _mediator_requirement() -> Requirement:
    found = [
        req
        for req in MEDIATOR_RESILIENCE.requirements()
        if canonicalize_name(req.name) == MEDIATOR.distribution
    ]
    assert len(found) == 1, (
        f"mediator-resilience requires {MEDIATOR.name} {len(found)} times"
    )
    return found[0]


def test_mediator_requirement_pins_our_own_version_line() -> None:
    requirement = _mediator_requirement()
    line = ".".join(str(part) for part in MEDIATOR.version().release[:2])
    own_line = SpecifierSet(f"=={line}.*")
    assert requirement.specifier == own_line, (
        f"mediator-resilience requires {requirement}; the two are released "
        f"together, so pin the line: {MEDIATOR.name}{own_line}"
    )


def test_mediator_requirement_admits_the_workspace_version() -> None:
    requirement = _mediator_requirement()
    version = MEDIATOR.version()
    assert requirement.specifier.contains(version, prereleases=True), (
        f"mediator-resilience requires {requirement}, but mediator/pyproject.toml is "
        f"at {version}: the two version lines drifted apart"
    )
    assert requirement.marker is None, f"{requirement} should hold everywhere"


def test_uv_sources_resolve_mediator_from_the_workspace() -> None:
    # A member's own [tool.uv.sources] entry overrides the workspace root's.
    root_sources: dict[str, Any] = root_pyproject()["tool"]["uv"].get("sources", {})
    effective = {**root_sources, **MEDIATOR_RESILIENCE.uv_sources()}
    source = effective.get(MEDIATOR.distribution)
    assert source == {"workspace": True}, (
        f"mediator-resilience must get `{MEDIATOR.name}` from the workspace "
        f"([tool.uv.sources] {MEDIATOR.name} = {{ workspace = true }}); "
        f"its effective source is {source!r}"
    )
    members = root_pyproject()["tool"]["uv"]["workspace"]["members"]
    assert MEDIATOR.directory in members


def _copy_workspace(destination: Path) -> Path:
    """The workspace's metadata without its lock, so uv resolves it afresh."""
    root = destination / "workspace"
    root.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    for member in MEMBERS:
        shutil.copytree(
            member.path,
            root / member.directory,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    return root


@pytest.mark.closure
@pytest.mark.timeout(300)
def test_lock_takes_mediator_from_the_workspace(uv: Path, tmp_path: Path) -> None:
    workspace = _copy_workspace(tmp_path)
    run(uv, "lock", cwd=workspace)
    packages: list[dict[str, Any]] = load_toml(workspace / "uv.lock")["package"]
    mediators = [p for p in packages if p["name"] == MEDIATOR.distribution]
    assert [(p["version"], p["source"]) for p in mediators] == [
        (str(MEDIATOR.version()), {"editable": MEDIATOR.directory})
    ], f"uv resolved `{MEDIATOR.name}` to {mediators}, not only to the member"
    foreign = [p["name"] for p in packages if p["name"] in FOREIGN_NAMES]
    assert not foreign, f"the lock holds {foreign}, unrelated projects of ours"
    (resilience,) = [
        p for p in packages if p["name"] == MEDIATOR_RESILIENCE.distribution
    ]
    assert {"name": MEDIATOR.distribution} in resilience["dependencies"]
