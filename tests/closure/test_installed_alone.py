"""Each distribution, built and installed alone, stays inside its closure.

Per DESIGN sections 1 and 7: each member goes into a fresh virtual environment of
its own, installed by its name from a local folder index that holds only the
members' wheels, the way a user installs it from the public index: the third-party
packages its closure declares come from the index first, then the member itself
with no index at all, so it and the members it requires (`mediator-resilience`
requires `mediator-core`, by that name) resolve from the built wheels and from
nowhere else, never from the work tree. There, every module of the package
imports, none of the forbidden packages lands in `sys.modules`, and the installed
distributions are the package's closure and nothing else.
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from ._process import run
from ._workspace import (
    BY_DISTRIBUTION,
    HTTP_RESILIENCE,
    MEDIATOR,
    MEMBER_IDS,
    MEMBERS,
    Built,
    Member,
    third_party_requirements,
    workspace_dependencies,
)

pytestmark = [pytest.mark.closure, pytest.mark.timeout(300)]

# No web framework in any of them: the ASGI middlewares take only the interface.
_WEB = frozenset({"fastapi", "starlette"})
FORBIDDEN_IMPORTS: Mapping[str, frozenset[str]] = {
    "mediator-core": frozenset(
        {
            "tenacity",
            "httpx",
            "sqlalchemy",
            "opentelemetry",
            "redis",
            "mediator_resilience",
            "http_resilience",
        }
    )
    | _WEB,
    "mediator-resilience": frozenset({"httpx", "http_resilience", "sqlalchemy"}) | _WEB,
    "http-resilience": frozenset(
        {"mediator", "mediator_resilience", "sqlalchemy", "opentelemetry"}
    )
    | _WEB,
}

# A pytest plugin module beside the package, so that pytest loading it (through
# its entry point) imports nothing of the package before coverage starts.
PLUGIN_MODULES: Mapping[str, str] = {
    "mediator-resilience": "_mediator_resilience_pytest.py",
    "http-resilience": "_http_resilience_pytest.py",
}

# Top-level packages that only an extra installs: a module needing one of them is
# skipped here, since the wheel is installed without its extras.
EXTRA_IMPORTS: Mapping[str, tuple[str, ...]] = {
    "mediator-core": ("sqlalchemy", "opentelemetry", "redis"),
    "mediator-resilience": (),
    "http-resilience": ("injector", "opentelemetry", "redis"),
}

PROBE = Path(__file__).with_name("_probe.py")


@dataclass(frozen=True)
class InstalledDistribution:
    version: str
    requires: list[str]


@dataclass(frozen=True)
class ProbeReport:
    """What `_probe.py` saw inside the environment."""

    imported: list[str]
    skipped: dict[str, str]
    failed: dict[str, str]
    loaded_top_levels: frozenset[str]
    outside_environment: dict[str, str]
    distributions: dict[NormalizedName, InstalledDistribution]

    @classmethod
    def from_json(cls, data: Any) -> ProbeReport:
        return cls(
            imported=list(data["imported"]),
            skipped=dict(data["skipped"]),
            failed=dict(data["failed"]),
            loaded_top_levels=frozenset(data["loaded_top_levels"]),
            outside_environment=dict(data["outside_environment"]),
            distributions={
                canonicalize_name(name): InstalledDistribution(
                    version=found["version"], requires=list(found["requires"])
                )
                for name, found in data["distributions"].items()
            },
        )


@dataclass(frozen=True)
class Installation:
    member: Member
    report: ProbeReport


def _venv_python(venv: Path) -> Path:
    if sys.platform == "win32":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _install_alone(
    uv: Path, built: Built, member: Member, home: Path, extras: tuple[str, ...] = ()
) -> Path:
    """A fresh environment holding `member` (with `extras`), installed by name."""
    venv = home / "venv"
    # The interpreter running the tests, so the Makefile's PYTHON is what is checked.
    run(uv, "venv", "--python", sys.executable, venv, cwd=home)
    python = _venv_python(venv)
    third_party = [str(req) for req in third_party_requirements(member, extras)]
    run(uv, "pip", "install", "--python", python, *third_party, cwd=home)
    wanted = member.name + (f"[{','.join(extras)}]" if extras else "")
    run(
        uv,
        "pip",
        "install",
        "--python",
        python,
        "--no-index",
        "--find-links",
        built.index,
        wanted,
        cwd=home,
    )
    return python


@pytest.fixture(scope="session", params=MEMBERS, ids=MEMBER_IDS)
def installation(
    request: pytest.FixtureRequest,
    uv: Path,
    built: Built,
    tmp_path_factory: pytest.TempPathFactory,
) -> Installation:
    """A fresh environment holding one member and what it requires."""
    member: Member = request.param
    home = tmp_path_factory.mktemp(member.import_name)
    python = _install_alone(uv, built, member, home)
    output = run(
        python,
        "-I",
        "-W",
        "error",
        PROBE,
        member.import_name,
        *EXTRA_IMPORTS[member.distribution],
        cwd=home,
    )
    return Installation(member, ProbeReport.from_json(json.loads(output)))


def test_every_module_imports(installation: Installation) -> None:
    member, report = installation.member, installation.report
    failures = "\n".join(f"--- {name}\n{tb}" for name, tb in report.failed.items())
    assert not report.failed, (
        f"installed alone, {member.distribution} has modules that do not import: "
        f"{sorted(report.failed)}\n{failures}"
    )
    assert member.import_name in report.imported


def test_no_forbidden_package_is_imported(installation: Installation) -> None:
    member, report = installation.member, installation.report
    forbidden = FORBIDDEN_IMPORTS[member.distribution] & report.loaded_top_levels
    assert not forbidden, (
        f"importing every module of {member.import_name} loaded {sorted(forbidden)}, "
        f"which it must never import (DESIGN section 1); "
        f"modules imported: {report.imported}"
    )


def test_nothing_is_imported_from_outside_the_environment(
    installation: Installation,
) -> None:
    outside = installation.report.outside_environment
    assert not outside, (
        "modules came from outside the fresh environment and its standard library "
        f"(the work tree leaking in?): {outside}"
    )


def _closure(
    root: NormalizedName, installed: Mapping[NormalizedName, InstalledDistribution]
) -> dict[NormalizedName, list[str]]:
    """Every distribution `root` needs at run time, with the chain that needs it."""
    environment = {key: str(value) for key, value in default_environment().items()}
    chains: dict[NormalizedName, list[str]] = {root: [root]}
    todo: list[tuple[NormalizedName, frozenset[str]]] = [(root, frozenset())]
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name not in installed:
            continue
        seen.add((name, extras))
        for text in installed[name].requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({**environment, "extra": extra})
                for extra in ("", *extras)
            ):
                continue
            needed = canonicalize_name(requirement.name)
            chains.setdefault(needed, [*chains[name], needed])
            todo.append((needed, frozenset(requirement.extras)))
    return chains


def test_installed_distributions_are_the_closure(installation: Installation) -> None:
    member, report = installation.member, installation.report
    chains = _closure(member.distribution, report.distributions)
    installed = set(report.distributions)
    forbidden = {
        canonicalize_name(name) for name in FORBIDDEN_IMPORTS[member.distribution]
    }
    dragged_in = {
        name: " -> ".join(chain) for name, chain in chains.items() if name in forbidden
    }
    assert not dragged_in, (
        f"{member.distribution}'s closure holds forbidden distributions: {dragged_in}"
    )
    assert installed == set(chains), (
        f"the environment holding only {member.distribution} should hold exactly its "
        f"closure.\n  installed, not in the closure: {sorted(installed - set(chains))}"
        f"\n  in the closure, not installed: {sorted(set(chains) - installed)}"
    )


def test_workspace_members_installed_are_the_local_builds(
    installation: Installation,
) -> None:
    installed = installation.report.distributions
    versions = {
        member.distribution: (installed[member.distribution].version, member.version())
        for member in MEMBERS
        if member.distribution in installed
    }
    wrong = {
        name: found
        for name, (found, ours) in versions.items()
        if Version(found) != ours
    }
    assert not wrong, (
        f"installed versions {wrong} are not the workspace's own builds: a release "
        "of the public index, or a stale build, was picked"
    )


def test_the_members_required_are_installed_by_name(
    installation: Installation,
) -> None:
    member, installed = installation.member, installation.report.distributions
    needed = {other.distribution for other in workspace_dependencies(member)}
    members_installed = {name for name in installed if name in BY_DISTRIBUTION}
    assert members_installed == {member.distribution, *needed}, (
        f"installing {member.name} by name from the local wheels brought "
        f"{sorted(members_installed)}; it requires {sorted(needed)} of the members"
    )


def test_wheel_declares_what_pyproject_declares(installation: Installation) -> None:
    member = installation.member
    metadata = installation.report.distributions[member.distribution].requires
    built = {
        str(requirement)
        for requirement in map(Requirement, metadata)
        if requirement.marker is None or "extra" not in str(requirement.marker)
    }
    declared = {str(requirement) for requirement in member.requirements()}
    assert built == declared, (
        f"the {member.distribution} wheel requires {sorted(built)}, "
        f"its pyproject.toml {sorted(declared)}"
    )


@pytest.mark.parametrize("member", MEMBERS, ids=MEMBER_IDS)
def test_wheel_holds_only_its_own_package(member: Member, built: Built) -> None:
    with zipfile.ZipFile(built.wheels[member.distribution]) as wheel:
        names = wheel.namelist()
    tops = {name.partition("/")[0] for name in names}
    dist_info = f"{member.file_stem}-{member.version()}.dist-info"
    plugin = PLUGIN_MODULES.get(member.distribution)
    own = {member.import_name, dist_info} | ({plugin} if plugin else set[str]())
    assert tops == own, f"the {member.distribution} wheel ships {sorted(tops)}"
    assert f"{member.import_name}/py.typed" in names, "no py.typed in the wheel"


def test_mediator_with_its_sqlalchemy_extra_imports_every_module(
    uv: Path, built: Built, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The extra's own module (`mediator.sqlalchemy`) imports once the extra is in,
    and still nothing forbidden comes along."""
    home = tmp_path_factory.mktemp("mediator-sqlalchemy")
    python = _install_alone(uv, built, MEDIATOR, home, extras=("sqlalchemy",))
    output = run(
        python,
        "-I",
        "-W",
        "error",
        PROBE,
        MEDIATOR.import_name,
        "opentelemetry",
        "redis",
        cwd=home,
    )
    report = ProbeReport.from_json(json.loads(output))

    assert not report.failed, sorted(report.failed)
    # the otel and redis extras' modules
    assert set(report.skipped) == {"mediator.otel", "mediator.redis"}, report.skipped
    assert "mediator.sqlalchemy" in report.imported
    forbidden = (
        FORBIDDEN_IMPORTS[MEDIATOR.distribution] - {"sqlalchemy"}
    ) & report.loaded_top_levels
    assert not forbidden, sorted(forbidden)


@pytest.mark.parametrize(
    ("member", "module"),
    [(MEDIATOR, "mediator.otel"), (HTTP_RESILIENCE, "http_resilience.otel")],
    ids=["mediator-core", "http-resilience"],
)
def test_the_otel_extra_installs_alone_and_its_module_imports(
    uv: Path,
    built: Built,
    tmp_path_factory: pytest.TempPathFactory,
    member: Member,
    module: str,
) -> None:
    """With only the ``otel`` extra, its module imports, and no web framework or
    other member comes along."""
    home = tmp_path_factory.mktemp(f"{member.import_name}-otel")
    python = _install_alone(uv, built, member, home, extras=("otel",))
    output = run(
        python,
        "-I",
        "-W",
        "error",
        PROBE,
        member.import_name,
        *EXTRA_IMPORTS[member.distribution],
        cwd=home,
    )
    report = ProbeReport.from_json(json.loads(output))

    assert not report.failed, sorted(report.failed)
    assert module in report.imported
    assert "opentelemetry" not in {
        missing.partition(".")[0] for missing in report.skipped.values()
    }
    forbidden = (
        FORBIDDEN_IMPORTS[member.distribution] - {"opentelemetry"}
    ) & report.loaded_top_levels
    assert not forbidden, sorted(forbidden)


def test_mediator_with_only_its_redis_extra_imports_the_stream_handoff(
    uv: Path, built: Built, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`mediator.redis` imports with ``redis`` alone: the hand-off and the
    consumer need no SQLAlchemy, which is neither installed nor imported."""
    home = tmp_path_factory.mktemp("mediator-redis")
    python = _install_alone(uv, built, MEDIATOR, home, extras=("redis",))
    output = run(
        python,
        "-I",
        "-W",
        "error",
        PROBE,
        MEDIATOR.import_name,
        "opentelemetry",
        "sqlalchemy",
        cwd=home,
    )
    report = ProbeReport.from_json(json.loads(output))

    assert not report.failed, sorted(report.failed)
    assert {"mediator.redis", "mediator.redis._consumer"} <= set(report.imported)
    assert set(report.skipped) == {"mediator.otel", "mediator.sqlalchemy"}
    forbidden = (
        FORBIDDEN_IMPORTS[MEDIATOR.distribution] - {"redis"}
    ) & report.loaded_top_levels
    assert not forbidden, sorted(forbidden)
    assert "sqlalchemy" not in report.distributions


def test_the_redis_extra_installs_alone_and_its_module_imports(
    uv: Path, built: Built, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """With only the ``redis`` extra, the module that talks to Redis imports,
    and no web framework, telemetry or other member comes along."""
    member = HTTP_RESILIENCE
    home = tmp_path_factory.mktemp("http_resilience-redis")
    python = _install_alone(uv, built, member, home, extras=("redis",))
    output = run(
        python,
        "-I",
        "-W",
        "error",
        PROBE,
        member.import_name,
        *EXTRA_IMPORTS[member.distribution],
        cwd=home,
    )
    report = ProbeReport.from_json(json.loads(output))

    assert not report.failed, sorted(report.failed)
    assert "http_resilience._fleet.redis_batch" in report.imported
    assert "redis" not in {
        missing.partition(".")[0] for missing in report.skipped.values()
    }
    forbidden = FORBIDDEN_IMPORTS[member.distribution] & report.loaded_top_levels
    assert not forbidden, sorted(forbidden)
