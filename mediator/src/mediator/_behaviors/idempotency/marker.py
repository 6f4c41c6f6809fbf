"""`@idempotent` and the idempotency key of a send: where it comes from, what it may be.

The decorator marks a command class; `idempotency_key` sets the key of the
current request (the ASGI middleware does it from the ``Idempotency-Key``
header); `derive_idempotency_key` gives a handler a stable key for the
outbound calls it makes; `is_replay` says whether a send was answered from the
store. `IdempotencyBehavior` (in `behavior`, beside this module) does the rest.
"""

from __future__ import annotations

import hashlib
import json
import types
import uuid
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    Final,
    Literal,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    overload,
)

from mediator._behaviors.idempotency.store import MAX_KEY_LENGTH
from mediator._core.context import Principal, is_replay
from mediator._core.errors import FieldError, ValidationError
from mediator._core.markers import (
    IDEMPOTENT_MARK,
    IdempotentMarker,
    is_idempotent,
    key_field_of,
)
from mediator._core.requests import Command, Query, is_request_type

__all__ = [
    "CONTEXT_KEY_FIELD",
    "SCOPE_VERSION",
    "ActiveSend",
    "ScopeMode",
    "active_send",
    "check_key",
    "current_idempotency_key",
    "derive_idempotency_key",
    "idempotency_key",
    "idempotent",
    "is_idempotent",
    "is_replay",
    "key_field_of",
    "minted_idempotency_key",
    "minted_key_running",
    "scope_of",
]

C = TypeVar("C", bound=type[Any])

CONTEXT_KEY_FIELD: Final = "idempotency_key"
"""The path of a key error when the key came from the context, not from a field."""

_LONGEST_SHOWN: Final = 40  # characters of a bad key quoted in a message


@overload
def idempotent(cls: C, /) -> C: ...


@overload
def idempotent(*, key: str | None = None) -> Callable[[C], C]: ...


def idempotent(cls: type[Any] | None = None, /, *, key: str | None = None) -> Any:
    """Run this command once per idempotency key; replay the outcome after that.

    Bare, ``@idempotent`` takes the key from the request context (set with
    `idempotency_key`, which the ASGI ``IdempotencyKeyMiddleware`` does from the
    ``Idempotency-Key`` header). ``@idempotent(key="request_id")`` takes it from
    that field of the command (a ``str`` or ``UUID`` field; when its value is
    None, the context's key is used). Inherited by subclasses, like
    `transactional`; a subclass may decorate again to name another field.

    `IdempotencyBehavior` does the work: a command sent again with a key that
    completed is answered from the store without running its handler. The key
    field is not part of the request's fingerprint.

    Raises:
        TypeError: On something that is not a `Command` class (a `Query` is
            refused: reading twice is safe already), or `key` names no field of
            the command, or a field that is not ``str`` or ``UUID``.

    Example:
        >>> from mediator import Command
        >>> @idempotent(key="request_id")
        ... class Charge(Command[str]):
        ...     request_id: str
        ...     cents: int
    """
    if key is not None and not isinstance(cast(object, key), str):
        raise TypeError(f"@idempotent(key=...) takes a field name, got {key!r}")

    def mark(target: C) -> C:
        _check_target(target)
        if key is not None:
            _check_field(target, key)
        setattr(target, IDEMPOTENT_MARK, IdempotentMarker(key))
        return target

    if cls is None:
        return mark
    return mark(cls)


def _check_target(target: object) -> None:
    if not isinstance(target, type):
        raise TypeError(
            "@idempotent goes on a Command class: write @idempotent or "
            f"@idempotent(key='field') above the class, got {target!r}"
        )
    if is_request_type(target) and issubclass(target, Query):
        raise TypeError(
            f"@idempotent goes on Command classes, not on the Query "
            f"{target.__qualname__}: a query changes nothing, so sending it twice "
            "is safe already"
        )
    if not (is_request_type(target) and issubclass(target, Command)):
        raise TypeError(f"@idempotent goes on Command classes, not on {target!r}")


def _check_field(target: type[Any], name: str) -> None:
    fields = cast("dict[str, Any]", target.model_fields)
    if name not in fields:
        known = ", ".join(fields) or "none"
        raise TypeError(
            f"@idempotent(key={name!r}): {target.__qualname__} has no field "
            f"{name!r} (its fields: {known})"
        )
    annotation: object = fields[name].annotation
    if not _is_key_type(annotation):
        raise TypeError(
            f"@idempotent(key={name!r}): the field {target.__qualname__}.{name} "
            f"must be a str or a UUID (or either or None), not {annotation!r}"
        )


def _is_key_type(annotation: object) -> bool:
    if get_origin(annotation) is Annotated:
        return _is_key_type(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_key_type(a) for a in members)
    return isinstance(annotation, type) and issubclass(annotation, str | uuid.UUID)


# --- the key of the current request --------------------------------------------

_context_key: ContextVar[str | None] = ContextVar(
    "mediator_idempotency_key", default=None
)


def current_idempotency_key() -> str | None:
    """The key set by `idempotency_key` in this context, if any.

    Example:
        >>> current_idempotency_key() is None
        True
    """
    return _context_key.get()


@contextmanager
def idempotency_key(value: str) -> Generator[str, None, None]:
    """Send the block's ``@idempotent`` commands under the key `value`.

    A web host sets it once per inbound request (``IdempotencyKeyMiddleware``
    does, from the ``Idempotency-Key`` header). The key is checked when a
    command is sent, where a bad one is a `ValidationError`. Tasks started
    inside the block inherit it.

    Raises:
        TypeError: `value` is not a string.

    Example:
        >>> with idempotency_key("order-7f3a"):
        ...     current_idempotency_key()
        'order-7f3a'
    """
    if not isinstance(cast(object, value), str):
        raise TypeError(f"idempotency_key() takes a string, got {value!r}")
    token = _context_key.set(value)
    try:
        yield value
    finally:
        _context_key.reset(token)


_minted: ContextVar[str | None] = ContextVar("mediator_minted_key", default=None)


@contextmanager
def minted_idempotency_key(value: str) -> Generator[str, None, None]:
    """`idempotency_key(value)` for a key this process made, not a caller's.

    The outbox's relay delivers each message under its message id, a UUID it
    minted when the message was recorded. No two callers can share such a
    key, so an ``@idempotent`` command sent under it needs no principal: an
    anonymous caller's message is applied once, like anyone's.
    """
    with idempotency_key(value):
        token = _minted.set(value)
        try:
            yield value
        finally:
            _minted.reset(token)


def minted_key_running() -> bool:
    """Whether the context's key is one `minted_idempotency_key` set."""
    minted = _minted.get()
    return minted is not None and minted == _context_key.get()


def check_key(key: str) -> str | None:
    """What is wrong with `key` as an idempotency key, or None when it is good.

    A key is 1 to `MAX_KEY_LENGTH` (255) visible ASCII characters: ``!`` to
    ``~``, no spaces, no control characters. The message never quotes more
    than the first 40 characters of a key.

    Example:
        >>> check_key("order-7f3a") is None
        True
        >>> check_key("")
        'an idempotency key must not be empty'
    """
    if not key:
        return "an idempotency key must not be empty"
    if len(key) > MAX_KEY_LENGTH:
        return (
            f"an idempotency key is at most {MAX_KEY_LENGTH} characters, got {len(key)}"
        )
    if not (key.isascii() and key.isprintable() and " " not in key):
        shown = key if len(key) <= _LONGEST_SHOWN else key[:_LONGEST_SHOWN] + "..."
        return (
            f"an idempotency key is 1 to {MAX_KEY_LENGTH} visible ASCII characters "
            f"('!' to '~'); {shown!r} has a space, a control or a non-ASCII "
            "character"
        )
    return None


def key_of(request: Any, field: str | None) -> tuple[str, str]:
    """The request's key and where it came from (the field's name, or the context).

    Raises:
        ValidationError: No key anywhere, or a bad one; the field error's path
            is the key's field, or ``("idempotency_key",)`` for the context's.
    """
    value: object = getattr(request, field) if field is not None else None
    source = field
    if value is None:
        value, source = _context_key.get(), CONTEXT_KEY_FIELD
    name = type(request).__qualname__
    if value is None:
        where = (
            f"set its field {field!r}, or send it inside "
            if field is not None
            else "send it inside "
        )
        raise ValidationError(
            f"{name} is @idempotent and was sent without an idempotency key",
            [
                FieldError(
                    (field or CONTEXT_KEY_FIELD,),
                    f"an idempotency key is required: {where}"
                    "`with idempotency_key(...)` (the Idempotency-Key header)",
                )
            ],
        )
    key = str(value) if isinstance(value, uuid.UUID) else cast(str, value)
    problem = check_key(key)
    if problem is not None:
        raise ValidationError(
            f"{name} has a bad idempotency key",
            [FieldError((cast(str, source),), problem)],
        )
    return key, cast(str, source)


# --- the send running now ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveSend:
    """The idempotent send whose handler is running: its scope and key."""

    scope: str
    key: str


_active: ContextVar[ActiveSend | None] = ContextVar(
    "mediator_idempotent_send", default=None
)

active_send: Final[Callable[[], ActiveSend | None]] = _active.get


@contextmanager
def running(send: ActiveSend) -> Generator[None, None, None]:
    """Make `send` the running idempotent send for the block (its handler)."""
    token = _active.set(send)
    try:
        yield
    finally:
        _active.reset(token)


def derive_idempotency_key(purpose: str) -> str | None:
    """A stable key for an outbound call made by the running idempotent send.

    The same for every run of the handler under one key (a retry, a takeover
    after a crash), different for each `purpose`, each key and each scope
    (tenant and operation): ``"d-"`` and 32 hex digits of a SHA-256. With it a
    POST to another service carries an ``Idempotency-Key``, so the HTTP client
    may retry it and that service runs it once.

    Args:
        purpose: What the call is, as your code names it (``"reserve-stock"``);
            one key per purpose and send.

    Returns:
        The key, or None outside an ``@idempotent`` send's handler.

    Raises:
        TypeError: `purpose` is not a string.
        ValueError: `purpose` is empty.

    Example:
        >>> derive_idempotency_key("reserve-stock") is None  # no send running
        True
    """
    if not isinstance(cast(object, purpose), str):
        raise TypeError(f"derive_idempotency_key() takes a string, got {purpose!r}")
    if not purpose:
        raise ValueError("derive_idempotency_key() needs a purpose, such as 'charge'")
    send = _active.get()
    if send is None:
        return None
    # JSON of the three keeps them apart: no separator can be forged.
    text = json.dumps([send.scope, send.key, purpose], ensure_ascii=False)
    return "d-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


ScopeMode = Literal["principal", "tenant"]
"""Whose record a key is: each principal's own, or shared by a tenant's users."""

SCOPE_VERSION: Final = "s1:"
"""The prefix of every scope: the version of its encoding."""


def scope_of(
    principal: Principal | None,
    operation: tuple[tuple[str, str], ...],
    *,
    mode: ScopeMode,
) -> str:
    """The scope an idempotency key is kept under: who calls, and what.

    The scope is ``"s1:"`` and 64 hex digits: the SHA-256 of the canonical
    JSON of a list of ``[kind, value]`` pairs. The caller's parts come first:

    - `mode` ``"principal"``: ``["principal", id]``, then ``["tenant", t]``
      when the principal has a ``tenant`` claim (the same id in two tenants is
      two callers);
    - `mode` ``"tenant"``: ``["tenant", t]``; a principal without a tenant
      claim is ``["principal", id]``, so that no id can pass for a tenant;
    - no principal: ``["anonymous", ""]``; whether anonymous callers may use
      keys at all is the caller's decision, taken before this.

    Then the `operation`'s pairs (``["command", "module:Class"]``, or
    ``["http", method], ["path", path]``). Each part keeps its kind, and JSON
    quotes every value, so no value can forge a separator nor pass for
    another kind; the digest keeps the scope one short size whatever the
    values hold (a 4 KB tenant, a NUL, a 3,000-character path).

    Example:
        >>> from mediator import Principal
        >>> ada = Principal("ada", claims={"tenant": "acme"})
        >>> scope = scope_of(ada, (("command", "shop:Charge"),), mode="principal")
        >>> scope.startswith("s1:"), len(scope)
        (True, 67)
        >>> scope == scope_of(Principal("acme"), (("command", "shop:Charge"),),
        ...                   mode="tenant")
        False
    """
    parts: list[tuple[str, str]] = []
    if principal is None:
        parts.append(("anonymous", ""))
    else:
        found: object = principal.claims.get("tenant")
        tenant = None if found is None else str(found)
        if mode == "principal" or tenant is None:
            parts.append(("principal", principal.id))
        if tenant is not None:
            parts.append(("tenant", tenant))
    parts.extend(operation)
    # ensure_ascii: a lone surrogate in a decoded path still encodes, the same
    # way every time.
    text = json.dumps([list(part) for part in parts], separators=(",", ":"))
    return SCOPE_VERSION + hashlib.sha256(text.encode("ascii")).hexdigest()
