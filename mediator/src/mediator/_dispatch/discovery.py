"""Finding handlers in packages and modules, for `register_from`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, cast

from mediator._behaviors.validation import Validator
from mediator._core.handlers import first_type_argument, is_concrete_handler

__all__ = ["find_handlers", "find_validators", "walk_modules"]


def walk_modules(target: ModuleType | str) -> Iterator[ModuleType]:
    """`target` and, for a package, every module in its subpackages, by name.

    Raises:
        TypeError: `target` is neither a module nor a dotted module name.
        ImportError: A module could not be imported (the error names it).
    """
    given = cast(object, target)
    if isinstance(given, str):
        module = importlib.import_module(given)
    elif isinstance(given, ModuleType):
        module = given
    else:
        raise TypeError(
            "register_from takes modules or packages (or their dotted names), "
            f"got {type(target).__qualname__}: {target!r}"
        )
    yield module
    path = getattr(module, "__path__", None)
    if path is None:
        return
    names = sorted(
        info.name for info in pkgutil.walk_packages(path, f"{module.__name__}.")
    )
    for name in names:
        yield importlib.import_module(name)


def find_handlers(module: ModuleType) -> list[type[Any]]:
    """Concrete handler classes defined in `module` itself, in definition order."""
    return _defined_in(module, is_concrete_handler)


def find_validators(module: ModuleType) -> list[type[Any]]:
    """Concrete `Validator` classes defined in `module` itself, in definition order."""
    return _defined_in(module, is_concrete_validator)


def is_concrete_validator(cls: type[Any]) -> bool:
    """A `Validator` subclass that can be built and names its request type."""
    return (
        Validator in cls.__mro__
        and cls is not Validator
        and not inspect.isabstract(cls)
        and isinstance(first_type_argument(cls, (Validator,)), type)
    )


def _defined_in(
    module: ModuleType, wanted: Callable[[type[Any]], bool]
) -> list[type[Any]]:
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and wanted(value)
    ]
