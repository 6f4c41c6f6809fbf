"""`scope_of`: one scope per caller and operation, never shared, always short."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mediator import Principal
from mediator._behaviors.idempotency.marker import ScopeMode, scope_of

CHARGE = (("command", "shop:Charge"),)


def http(path: str, method: str = "POST") -> tuple[tuple[str, str], ...]:
    return (("http", method), ("path", path))


def test_the_scope_is_a_versioned_digest_of_the_kinds_and_values() -> None:
    ada = Principal("ada", claims={"tenant": "acme"})
    text = json.dumps(
        [["principal", "ada"], ["tenant", "acme"], ["command", "shop:Charge"]],
        separators=(",", ":"),
    )
    expected = "s1:" + hashlib.sha256(text.encode()).hexdigest()
    assert scope_of(ada, CHARGE, mode="principal") == expected


@pytest.mark.parametrize(
    ("principal", "mode", "parts"),
    [
        (None, "principal", [["anonymous", ""]]),
        (None, "tenant", [["anonymous", ""]]),
        (Principal("u"), "principal", [["principal", "u"]]),
        (Principal("u"), "tenant", [["principal", "u"]]),
        (
            Principal("u", claims={"tenant": "t"}),
            "principal",
            [["principal", "u"], ["tenant", "t"]],
        ),
        (Principal("u", claims={"tenant": "t"}), "tenant", [["tenant", "t"]]),
        (Principal("u", claims={"tenant": 7}), "tenant", [["tenant", "7"]]),
    ],
)
def test_the_callers_parts(
    principal: Principal | None, mode: ScopeMode, parts: list[list[str]]
) -> None:
    text = json.dumps([*parts, ["http", "POST"], ["path", "/x"]], separators=(",", ":"))
    assert scope_of(principal, http("/x"), mode=mode) == (
        "s1:" + hashlib.sha256(text.encode()).hexdigest()
    )


@pytest.mark.parametrize("mode", ["principal", "tenant"])
def test_a_principal_id_never_passes_for_a_tenant(mode: ScopeMode) -> None:
    named = scope_of(Principal("acme"), CHARGE, mode=mode)
    member = scope_of(Principal("u-1", claims={"tenant": "acme"}), CHARGE, mode=mode)
    assert named != member


def test_a_separator_in_a_tenant_or_a_path_forges_no_scope() -> None:
    # Joined as "<tenant>|HTTP <method> <path>", these two were one scope.
    plain = scope_of(
        Principal("u", claims={"tenant": "acme"}),
        http("/orders/|HTTP POST /orders/1"),
        mode="tenant",
    )
    crafted = scope_of(
        Principal("u", claims={"tenant": "acme|HTTP POST /orders/"}),
        http("/orders/1"),
        mode="tenant",
    )
    assert plain != crafted


def test_anonymous_is_apart_from_every_principal() -> None:
    anonymous = scope_of(None, CHARGE, mode="principal")
    assert anonymous != scope_of(Principal(""), CHARGE, mode="principal")
    assert anonymous != scope_of(Principal("anonymous"), CHARGE, mode="principal")


def test_http_and_command_operations_are_apart() -> None:
    ada = Principal("ada")
    assert scope_of(ada, (("command", "POST"),), mode="principal") != scope_of(
        ada, (("http", "POST"), ("path", "")), mode="principal"
    )


def test_odd_and_huge_values_give_one_short_ascii_scope() -> None:
    huge = Principal("u\x00" * 2048, claims={"tenant": "t|\"'" * 1024})
    scope = scope_of(huge, http("/" + "a" * 3000 + "\x00\ud800%7C|"), mode="principal")
    assert len(scope) == 67
    assert scope.isascii()
    assert scope.isprintable()
    assert scope.startswith("s1:")


# --- the fuzz: no two distinct callers share a scope ----------------------------------

ODD = ["|", '"', "'", "%7C", "\x00", "\\", ",", "[", "]", ":", " ", "HTTP", "\u00e9"]
values = st.one_of(
    st.sampled_from(["", "acme", "u-1", "acme|", "|acme", "a|b", 'a"b']),
    st.lists(st.sampled_from([*ODD, "a", "b", "acme"]), max_size=6).map("".join),
    st.text(max_size=12),
    st.sampled_from(["t" * 4096, "|" * 4096, "\x00" * 4096]),
)
callers = st.tuples(
    st.one_of(st.none(), values),  # the principal's id; None: anonymous
    st.one_of(st.none(), values),  # its tenant claim
    st.sampled_from(["POST", "PATCH"]),
    st.one_of(values, st.sampled_from(["/orders", "/orders/1", "/orders|1"])),
)
Caller = tuple[str | None, str | None, str, str]


def identity(caller: Caller, mode: ScopeMode) -> tuple[Any, ...]:
    """Who the caller is under `mode`, and what it calls: what a scope must tell."""
    id_, tenant, method, path = caller
    if id_ is None:
        who: tuple[Any, ...] = ("anonymous",)
    elif mode == "principal":
        who = ("principal", id_, tenant)
    else:
        who = ("tenant", tenant) if tenant is not None else ("principal", id_)
    return (*who, method, path)


def scope_for(caller: Caller, mode: ScopeMode) -> str:
    id_, tenant, method, path = caller
    principal = (
        None
        if id_ is None
        else Principal(id_, claims={} if tenant is None else {"tenant": tenant})
    )
    return scope_of(principal, http(path, method), mode=mode)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(callers, min_size=2, max_size=8), st.sampled_from(["principal", "tenant"])
)
def test_no_two_distinct_callers_share_a_scope(
    many: list[Caller], mode: ScopeMode
) -> None:
    seen: dict[str, tuple[Any, ...]] = {}
    for caller in many:
        scope = scope_for(caller, mode)
        assert len(scope) == 67
        who = identity(caller, mode)
        assert seen.setdefault(scope, who) == who
    distinct = {identity(caller, mode) for caller in many}
    assert len({scope_for(caller, mode) for caller in many}) == len(distinct)
