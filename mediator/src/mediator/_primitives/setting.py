"""`Setting`: a field type checkers see set as one type and read as another.

Type checkers take a pydantic field's annotation as its constructor
parameter, so a field annotated `timedelta` would take only a `timedelta`,
though pydantic reads seconds and strings too. Under ``TYPE_CHECKING`` a field
type that reads more than it holds is a `Setting` instead, a descriptor whose
``__set__`` takes what the field takes and whose ``__get__`` gives what it
holds: pyright (PEP 681's ``dataclass_transform``) and mypy's pydantic plugin
(``init_typed``) take the ``__set__`` value type as the ``__init__``
parameter. At run time nothing of it exists, and pydantic sees the field's
real annotation.

A default must be a `Setting` to type checkers too: wrap it in `default`,
which returns it unchanged.

Example::

    if TYPE_CHECKING:
        Duration = Setting[timedelta, DurationInput]
    else:
        Duration = Annotated[timedelta, BeforeValidator(read_duration)]

    class Options(BaseModel):
        timeout: Duration = default(timedelta(seconds=1))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

__all__ = ["Setting", "default"]

_Held = TypeVar("_Held", covariant=True)
_Taken = TypeVar("_Taken", contravariant=True)
_T = TypeVar("_T")

if TYPE_CHECKING:

    class Setting(Generic[_Held, _Taken]):
        """A field that takes `_Taken` and holds `_Held` (to type checkers only)."""

        @overload
        def __get__(self, obj: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, obj: object, owner: Any) -> _Held: ...
        def __get__(self, obj: object, owner: Any) -> _Held | Self: ...
        def __set__(self, obj: object, value: _Taken) -> None: ...

    def default(value: object) -> Any:
        """`value`, as the default of a `Setting` field.

        `Any` to type checkers: a default must fit the field's `Setting` where
        the class declares it, and the parameter's type where the class is
        called (a ``default_factory``, for one).
        """
        ...

else:

    def default(value: _T) -> _T:
        """`value`, as the default of a `Setting` field."""
        return value
