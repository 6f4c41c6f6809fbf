"""The workspace members, as their own pyproject.toml files declare them."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        return tomllib.load(file)


@dataclass(frozen=True)
class Member:
    """One distribution of the workspace: where it lives and what it is called."""

    directory: str
    import_name: str
    name: str
    """The distribution's name, as published on the public index."""

    @property
    def path(self) -> Path:
        return REPO_ROOT / self.directory

    @property
    def distribution(self) -> NormalizedName:
        return canonicalize_name(self.name)

    @property
    def file_stem(self) -> str:
        """How wheel, sdist and dist-info names spell the distribution."""
        return self.distribution.replace("-", "_")

    def pyproject(self) -> dict[str, Any]:
        return load_toml(self.path / "pyproject.toml")

    def project(self) -> dict[str, Any]:
        project: dict[str, Any] = self.pyproject()["project"]
        return project

    def version(self) -> Version:
        return Version(self.project()["version"])

    def requirements(self) -> list[Requirement]:
        """The runtime requirements, without the extras."""
        return [Requirement(text) for text in self.project().get("dependencies", [])]

    def extras(self) -> dict[str, list[Requirement]]:
        optional: dict[str, list[str]] = self.project().get("optional-dependencies", {})
        return {
            extra: [Requirement(text) for text in texts]
            for extra, texts in optional.items()
        }

    def uv_sources(self) -> dict[str, Any]:
        sources: dict[str, Any] = (
            self.pyproject().get("tool", {}).get("uv", {}).get("sources", {})
        )
        return sources


# The import name `mediator` is not the distribution's: on the public index the
# name `mediator` belongs to an unrelated 2017 project.
MEDIATOR = Member("mediator", "mediator", "mediator-core")
MEDIATOR_RESILIENCE = Member(
    "mediator_resilience", "mediator_resilience", "mediator-resilience"
)
HTTP_RESILIENCE = Member("http_resilience", "http_resilience", "http-resilience")
# Names taken on the public index by projects that are not ours.
FOREIGN_NAMES = frozenset({canonicalize_name("mediator")})
MEMBERS = (MEDIATOR, MEDIATOR_RESILIENCE, HTTP_RESILIENCE)
MEMBER_IDS = [member.distribution for member in MEMBERS]
BY_DISTRIBUTION = {member.distribution: member for member in MEMBERS}


@dataclass(frozen=True)
class Built:
    """The members' distributions, as they would be uploaded."""

    index: Path
    """A local folder index (`--find-links`) holding exactly the wheels."""
    wheels: dict[NormalizedName, Path]
    sdists: dict[NormalizedName, Path]


def root_pyproject() -> dict[str, Any]:
    return load_toml(REPO_ROOT / "pyproject.toml")


def workspace_dependencies(member: Member) -> list[Member]:
    """The other members that `member` requires at run time."""
    names = {canonicalize_name(req.name) for req in member.requirements()}
    return [other for other in MEMBERS if other.distribution in names]


def third_party_requirements(
    member: Member, extras: tuple[str, ...] = ()
) -> list[Requirement]:
    """What `member` (with `extras`) and the members it requires need from elsewhere."""
    wanted = member.requirements() + [
        req for extra in extras for req in member.extras()[extra]
    ]
    for other in workspace_dependencies(member):
        wanted += other.requirements()
    return [req for req in wanted if canonicalize_name(req.name) not in BY_DISTRIBUTION]
