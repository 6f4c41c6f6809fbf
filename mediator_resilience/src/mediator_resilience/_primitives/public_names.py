"""`publish`: a public module becomes the home of every object it exports.

A class or function is written in a private module (`_core/errors.py`) and
exported by a public one (the package's `__init__.py`). Each public module
ends by calling `publish(__name__, __all__)`, so reprs, pickles and tracebacks
name the public module, and the private files can move without breaking a
pickle or a user's ``isinstance`` check made by name.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable


def publish(module: str, names: Iterable[str]) -> None:
    """Set `module` as the ``__module__`` of each class and function it exports.

    Names that are not a class or a function (aliases, constants, instances)
    are left alone, and so is an object already named by a public module or
    written outside the package. Before a class moves, its own annotations are
    resolved where they were written, so `typing.get_type_hints` still finds
    names the public module never imported; one that does not resolve stays a
    string.

    Args:
        module: The public module's ``__name__``, already in `sys.modules`.
        names: The names it exports (its ``__all__``).
    """
    namespace = vars(sys.modules[module])
    package = module.partition(".")[0]
    for name in names:
        value: object = namespace[name]
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        written: str = value.__module__
        if not _private(written, package):
            continue
        if inspect.isclass(value) and "__annotations__" in vars(value):
            value.__annotations__ = _resolved(value, vars(sys.modules[written]))
        value.__module__ = module


def _private(module: str, package: str) -> bool:
    parts = module.split(".")
    return parts[0] == package and any(part.startswith("_") for part in parts[1:])


def _resolved(cls: type, where: dict[str, object]) -> dict[str, object]:
    # The order `typing.get_type_hints` looks in: the module, then the class.
    own: dict[str, object] = dict(vars(cls)["__annotations__"])
    for name, annotation in own.items():
        if isinstance(annotation, str):
            try:
                own[name] = eval(annotation, dict(vars(cls)), where)
            except Exception:  # get_type_hints will say why
                continue
    return own
