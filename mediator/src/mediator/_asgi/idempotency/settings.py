"""`IdempotencyKeyMiddleware` settings: defaults, and the checks of its arguments."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Final, cast, get_args

from mediator._asgi.problem import check_header_name
from mediator._asgi.types import Scope
from mediator._behaviors.idempotency.behavior import MAX_RETENTION
from mediator._behaviors.idempotency.marker import ScopeMode

__all__ = [
    "ALWAYS_KEPT",
    "DEFAULT_IDEMPOTENCY_HEADER",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_METHODS",
    "Required",
    "checked_limit",
    "checked_methods",
    "checked_replay_headers",
    "checked_required",
    "checked_scope",
    "checked_times",
]

DEFAULT_IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
DEFAULT_METHODS: Final = ("POST", "PATCH")
DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
"""The largest request body read (and hashed) for a keyed request: 1 MiB."""
DEFAULT_MAX_RESPONSE_BYTES: Final = 1_048_576
"""The largest answer body kept for replay: 1 MiB; a larger one is not kept."""

# Kept with every answer: what a client needs to read the body and follow it.
# Never set-cookie (a session for whoever sends the key next) nor content-length
# (recomputed on replay).
ALWAYS_KEPT: Final = frozenset({b"content-type", b"content-encoding", b"location"})
_NEVER_KEPT: Final = frozenset({b"set-cookie", b"content-length"})
_METHOD: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

Required = Callable[[Scope], bool] | Collection[str]
"""Which requests a rule covers: a test of the scope, or path prefixes."""

_SCOPES: Final = frozenset(get_args(ScopeMode))


def checked_required(value: object, argument: str) -> Callable[[Scope], bool]:
    if callable(value):
        return cast("Callable[[Scope], bool]", value)
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise TypeError(
            f"{argument} must be a callable taking the ASGI scope, or a collection "
            f"of path prefixes, got {type(value).__name__}"
        )
    prefixes: list[str] = []
    for prefix in cast("Collection[object]", value):
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(
                f"{argument} path prefixes must be strings starting with '/', "
                f"got {prefix!r}"
            )
        prefixes.append(prefix.rstrip("/"))
    if not prefixes:
        return _never
    if "" in prefixes:
        return _always
    bounded = tuple(prefixes)

    def under(scope: Scope) -> bool:
        path = str(scope.get("path", ""))
        return any(
            path == prefix or path.startswith(prefix + "/") for prefix in bounded
        )

    return under


def _never(scope: Scope) -> bool:
    return False


def _always(scope: Scope) -> bool:
    return True


def checked_scope(value: object) -> ScopeMode:
    if not isinstance(value, str) or value not in _SCOPES:
        raise ValueError(f"scope must be 'principal' or 'tenant', got {value!r}")
    return cast("ScopeMode", value)


def checked_methods(value: object) -> frozenset[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise TypeError(
            f"methods must be a collection of HTTP methods, got {type(value).__name__}"
        )
    methods = cast("Collection[object]", value)
    if not methods:
        raise ValueError("methods must name at least one HTTP method")
    for method in methods:
        if not isinstance(method, str) or _METHOD.fullmatch(method) is None:
            raise ValueError(f"methods must be HTTP methods, got {method!r}")
    return frozenset(str(method).upper() for method in methods)


def checked_replay_headers(value: object) -> frozenset[bytes]:
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise TypeError(
            "replay_headers must be a collection of header names, got "
            f"{type(value).__name__}"
        )
    names = frozenset(
        check_header_name(name, "replay_headers")
        for name in cast("Collection[object]", value)
    )
    refused = sorted(name.decode("ascii") for name in names & _NEVER_KEPT)
    if refused:
        raise ValueError(
            f"replay_headers may not name {', '.join(refused)}: they are never replayed"
        )
    return names


def checked_limit(value: object, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{argument} must be a whole number of bytes, got {type(value).__name__}"
        )
    if value <= 0:
        raise ValueError(f"{argument} must be positive, got {value}")
    return value


def checked_times(lease: object, retention: object) -> tuple[timedelta, timedelta]:
    for argument, value in (("lease", lease), ("retention", retention)):
        if not isinstance(value, timedelta):
            raise TypeError(
                f"{argument} must be a timedelta, got {type(value).__name__}"
            )
    lease = cast("timedelta", lease)
    retention = cast("timedelta", retention)
    if lease <= timedelta(0):
        raise ValueError(f"lease must be positive, got {lease}")
    if retention > MAX_RETENTION:
        raise ValueError(f"retention must be at most {MAX_RETENTION}, got {retention}")
    if retention < lease:
        raise ValueError(
            f"retention ({retention}) must be at least the lease ({lease}): a "
            "kept answer must outlive its claim"
        )
    return lease, retention
