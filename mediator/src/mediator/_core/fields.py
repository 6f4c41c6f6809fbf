"""Record fields: the names and sensitive fields of a request, and its redaction.

What the audit writes and what the idempotency fingerprint leaves out are read
here, once per class, for pydantic models, dataclasses and attrs classes.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, cast, get_args, get_origin, get_type_hints

from pydantic import BaseModel, SecretBytes, SecretStr

__all__ = [
    "REDACTED",
    "Sensitive",
    "field_names",
    "redacted_fields",
    "sensitive_fields",
]

REDACTED: Final = "[redacted]"  # what a sensitive field's value becomes in a record


class Sensitive:
    """Marks a request field that must never reach an audit record.

    Use it as `Annotated` metadata; `SecretStr` and `SecretBytes` fields are
    treated as sensitive without it.

    Example:
        >>> from typing import Annotated
        >>> from mediator import Command
        >>> class Pay(Command[str]):
        ...     card_number: Annotated[str, Sensitive()]
    """

    def __repr__(self) -> str:
        return "Sensitive()"


_CYCLE: Final = "[cycle]"  # a value that contains itself, met again inside itself
_TOO_DEEP: Final = "[too deep]"  # below _MAX_DEPTH; never written, it may hold secrets
_MAX_DEPTH: Final = 32

# Read once per class. A weak mapping, so a class defined at run time (in a test,
# say) is not kept alive by having been audited once.
_FIELD_NAMES: Final[weakref.WeakKeyDictionary[type[Any], tuple[str, ...]]] = (
    weakref.WeakKeyDictionary()
)
_SENSITIVE_FIELDS: Final[weakref.WeakKeyDictionary[type[Any], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def redacted_fields(model: BaseModel) -> dict[str, Any]:
    """The model's fields, recursively, with sensitive values replaced.

    Redaction goes through pydantic models, dataclasses, attrs classes (any
    class with ``__attrs_attrs__``), mappings, lists, tuples and sets, at any
    depth; a value met again inside itself becomes ``"[cycle]"`` and anything
    nested deeper than 32 levels ``"[too deep]"``.
    """
    return _Redaction().fields(model, 0)


class _Redaction:
    """One walk over a request; remembers the containers on the current path."""

    __slots__ = ("_path",)

    def __init__(self) -> None:
        self._path: set[int] = set()

    def fields(self, value: object, depth: int) -> dict[str, Any]:
        cls = type(value)
        sensitive = _sensitive_fields(cls)
        return {
            name: REDACTED
            if name in sensitive
            or isinstance(field := getattr(value, name), SecretStr | SecretBytes)
            else self.value(field, depth + 1)
            for name in _field_names(cls)
        }

    def value(self, value: object, depth: int) -> Any:
        if not _is_container(value):
            return value
        if depth > _MAX_DEPTH:
            return _TOO_DEEP
        key = id(value)
        if key in self._path:
            return _CYCLE
        self._path.add(key)
        try:
            if isinstance(value, Mapping):
                items = cast("Mapping[object, object]", value).items()
                return {k: self.value(v, depth + 1) for k, v in items}
            if isinstance(value, list | tuple | set | frozenset):
                members = cast("Iterable[object]", value)
                return [self.value(v, depth + 1) for v in members]
            return self.fields(value, depth)
        finally:
            self._path.discard(key)


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The field names of a pydantic model, dataclass or attrs class (cached)."""
    return _field_names(cls)


def sensitive_fields(cls: type[Any]) -> frozenset[str]:
    """The fields of `cls` marked `Sensitive`, anywhere in their annotation (cached).

    `SecretStr` and `SecretBytes` values are sensitive too; they are told by
    their value, not by their field.
    """
    return _sensitive_fields(cls)


def _is_container(value: object) -> bool:
    return isinstance(
        value, BaseModel | Mapping | list | tuple | set | frozenset
    ) or _is_record_class(type(value))


def _is_record_class(cls: type[Any]) -> bool:
    """A class whose instances are a fixed set of named fields, besides pydantic's."""
    return dataclasses.is_dataclass(cls) or hasattr(cls, "__attrs_attrs__")


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = _read_field_names(cls)
    return names


def _read_field_names(cls: type[Any]) -> tuple[str, ...]:
    if issubclass(cls, BaseModel):
        return tuple(cls.model_fields)
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    return tuple(attribute.name for attribute in _attrs_attributes(cls))


def _attrs_attributes(cls: type[Any]) -> tuple[Any, ...]:
    attributes: tuple[Any, ...] = getattr(cls, "__attrs_attrs__", ())
    return attributes


def _sensitive_fields(cls: type[Any]) -> frozenset[str]:
    names = _SENSITIVE_FIELDS.get(cls)
    if names is None:
        names = _SENSITIVE_FIELDS[cls] = _read_sensitive_fields(cls)
    return names


def _read_sensitive_fields(cls: type[Any]) -> frozenset[str]:
    # Marked anywhere in the annotation: `Annotated[str, Sensitive()] | None` and
    # `list[Annotated[str, Sensitive()]]` keep the marker inside the type.
    if issubclass(cls, BaseModel):
        return frozenset(
            name
            for name, info in cls.model_fields.items()
            if any(isinstance(m, Sensitive) for m in info.metadata)
            or _marked(info.annotation)
        )
    declared = _annotations(cls)
    return frozenset(name for name in _field_names(cls) if _marked(declared.get(name)))


def _annotations(cls: type[Any]) -> dict[str, object]:
    """The fields' annotations, resolved where they can be."""
    if dataclasses.is_dataclass(cls):
        declared = {field.name: field.type for field in dataclasses.fields(cls)}
    else:
        declared = {a.name: a.type for a in _attrs_attributes(cls)}
    try:
        resolved = get_type_hints(cls, include_extras=True)
    except Exception:  # a name that does not resolve, such as a local class
        # Each field then keeps what its class declared, a string under
        # `from __future__ import annotations`; `_marked` reads the marker in it.
        resolved = {}
    return {name: resolved.get(name, declared[name]) for name in declared}


def _marked(annotation: object) -> bool:
    if isinstance(annotation, str):
        # An annotation that could not be resolved: err on the side of the secret.
        return "Sensitive(" in annotation
    metadata: tuple[object, ...] = getattr(annotation, "__metadata__", ())
    if get_origin(annotation) is Annotated and any(
        isinstance(m, Sensitive) for m in metadata
    ):
        return True
    return any(_marked(argument) for argument in get_args(annotation))
