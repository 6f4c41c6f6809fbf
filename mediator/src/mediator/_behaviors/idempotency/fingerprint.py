"""The fingerprint of a request: a hash of its canonical form.

A key reused with another request must be refused, not replayed, so the store
keeps a fingerprint of the request it first saw. Two requests that mean the
same get one fingerprint, whatever their field order or the spelling of their
numbers and strings; the canonical form is JSON text:

- an object per model (pydantic, dataclass, attrs) and per mapping, its keys
  sorted (by code point); a model's fields by name, not by alias; the request
  itself is ``{"fields": {...}, "type": "<module>:<qualname>"}``, without the
  field that holds the idempotency key;
- numbers in one form, whatever their type: the exact decimal value as
  ``<digits>e<exponent>``, the digits without trailing zeros (``1``, ``1.0``
  and ``Decimal("1.00")`` are all ``1e0``; ``0.5`` is ``5e-1``; zero is ``0``);
  a float is read by its shortest repr (``0.1`` is ``1e-1``, as
  ``Decimal("0.1")``); NaN and the infinities are ``NaN``, ``Infinity`` and
  ``-Infinity``. Booleans stay ``true`` and ``false``;
- strings in Unicode NFC, escaped as JSON (non-ASCII kept); bytes as base64;
- lists and tuples as arrays in order; sets as arrays sorted by their
  members' canonical text;
- anything else as pydantic writes it in JSON mode (datetimes in ISO 8601 as
  given, with their offset; UUIDs, enums, paths), then canonical;
- a field marked `Sensitive`, and any `SecretStr` or `SecretBytes` value, as
  ``{"sha256": "<hex of its canonical text>"}``: the canonical text never holds
  a secret in clear (a different card number still gives another fingerprint).

The fingerprint is the SHA-256 of the canonical text (UTF-8), in hex.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import unicodedata
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Final, cast

from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr, TypeAdapter

from mediator._core.fields import field_names, sensitive_fields

__all__ = ["MAX_DEPTH", "canonical_number", "canonical_text", "fingerprint"]

MAX_DEPTH: Final = 64
"""How deeply values may nest in a request that is fingerprinted."""

_JSON: Final[TypeAdapter[object]] = TypeAdapter(
    object, config=ConfigDict(ser_json_bytes="base64")
)


def fingerprint(request: BaseModel, *, exclude: str | None = None) -> str:
    """The SHA-256 (hex) of the request's canonical text.

    Args:
        request: The request.
        exclude: A field left out: the one holding the idempotency key.

    Raises:
        ValueError: The request nests deeper than `MAX_DEPTH`, or holds itself.
    """
    text = canonical_text(request, exclude=exclude)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_text(request: BaseModel, *, exclude: str | None = None) -> str:
    """The request's canonical form (see the module's docstring).

    Example:
        >>> from decimal import Decimal
        >>> from mediator import Command
        >>> class Pay(Command[None]):
        ...     amount: Decimal
        ...     memo: str
        >>> canonical_text(Pay(memo="café", amount=Decimal("10.50")))[:41]
        '{"fields":{"amount":105e-1,"memo":"café"}'
    """
    cls = type(request)
    fields = _Canonical().model(request, 0, exclude)
    kind = f"{cls.__module__}:{cls.__qualname__}"
    return '{"fields":' + fields + ',"type":' + _string(kind) + "}"


def canonical_number(value: int | float | Decimal) -> str:
    """One number's canonical text: ``<digits>e<exponent>``, ``0``, NaN or infinite.

    Example:
        >>> [canonical_number(v) for v in (1, 1.0, Decimal("1.00"), 0.5, -1200)]
        ['1e0', '1e0', '1e0', '5e-1', '-12e2']
    """
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else _infinity(value > 0)
        # The shortest repr that reads back as the same float: 0.1, not the
        # binary fraction's 55 digits.
        number = Decimal(repr(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            return "NaN" if value.is_nan() else _infinity(value > 0)
        number = value
    else:
        number = Decimal(value)
    if number.is_zero():
        return "0"
    sign, digits, exponent = number.as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    exponent = cast(int, exponent) + len(digits) - len(text)
    return f"{'-' if sign else ''}{text}e{exponent}"


def _infinity(positive: bool) -> str:
    return "Infinity" if positive else "-Infinity"


def _string(value: str) -> str:
    return json.dumps(unicodedata.normalize("NFC", value), ensure_ascii=False)


class _Canonical:
    """One walk over a request; remembers the containers on the current path."""

    __slots__ = ("_path",)

    def __init__(self) -> None:
        self._path: set[int] = set()

    def model(self, value: object, depth: int, exclude: str | None = None) -> str:
        cls = type(value)
        sensitive = sensitive_fields(cls)
        members: list[tuple[str, str]] = []
        for name in field_names(cls):
            if name == exclude:
                continue
            field = getattr(value, name)
            text = self.value(field, depth + 1)
            if name in sensitive:
                text = _hashed(text)
            members.append((unicodedata.normalize("NFC", name), text))
        return _object(members)

    def value(self, value: object, depth: int) -> str:
        # bool first: it is an int too.
        if value is None or isinstance(value, bool):
            return json.dumps(value)
        if isinstance(value, int | float | Decimal):
            return canonical_number(value)
        if isinstance(value, str):
            return _string(value)
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(cast("bytes | bytearray", value))
            return _string(base64.b64encode(raw).decode("ascii"))
        if isinstance(value, SecretStr):
            return _hashed(_string(value.get_secret_value()))
        if isinstance(value, SecretBytes):
            return _hashed(self.value(value.get_secret_value(), depth))
        if depth > MAX_DEPTH:
            raise ValueError(
                f"the request nests deeper than {MAX_DEPTH} levels, so it cannot "
                "be fingerprinted"
            )
        if isinstance(value, BaseModel | Mapping | list | tuple | set | frozenset):
            return self._container(cast(object, value), depth)
        if dataclasses.is_dataclass(value) or hasattr(value, "__attrs_attrs__"):
            return self._container(value, depth)
        # Dates, UUIDs, enums, paths...: as pydantic writes them in JSON.
        plain = _JSON.dump_python(value, mode="json")
        return self.value(plain, depth + 1)

    def _container(self, value: object, depth: int) -> str:
        key = id(value)
        if key in self._path:
            raise ValueError("the request holds itself, so it cannot be fingerprinted")
        self._path.add(key)
        try:
            if isinstance(value, Mapping):
                items = cast("Mapping[object, object]", value).items()
                return _object(
                    (self._key(k, depth), self.value(v, depth + 1)) for k, v in items
                )
            if isinstance(value, list | tuple):
                members = cast("Iterable[object]", value)
                return _array(self.value(v, depth + 1) for v in members)
            if isinstance(value, set | frozenset):
                members = cast("Iterable[object]", value)
                return _array(sorted(self.value(v, depth + 1) for v in members))
            return self.model(value, depth)
        finally:
            self._path.discard(key)

    def _key(self, key: object, depth: int) -> str:
        # JSON keys are strings: another key is written as its canonical text.
        if isinstance(key, str):
            return unicodedata.normalize("NFC", key)
        return self.value(key, depth + 1)


def _hashed(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return '{"sha256":"' + digest + '"}'


def _object(members: Iterable[tuple[str, str]]) -> str:
    ordered = sorted(members)
    return "{" + ",".join(_string(k) + ":" + v for k, v in ordered) + "}"


def _array(members: Iterable[str]) -> str:
    return "[" + ",".join(members) + "]"
