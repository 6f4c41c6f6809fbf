"""Where a class is written, now that its ``__module__`` names its public module.

Each public module sets ``__module__`` on what it exports, so
`inspect.getsource` and `doctest` look for an exported class in the public
module's file. Tests that read a class's source, or run the examples of each
private module, find the module that writes it here.
"""

from __future__ import annotations

import ast
import contextvars
import doctest
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import cast


def written_in(cls: type) -> ModuleType:
    """The module whose file holds ``class <cls.__name__>`` at its top level."""
    package = cls.__module__.partition(".")[0]
    pattern = re.compile(rf"^class {re.escape(cls.__name__)}\b", re.MULTILINE)
    for name, module in sorted(sys.modules.items()):
        if (
            name.partition(".")[0] != package
            or vars(module).get(cls.__name__) is not cls
        ):
            continue
        file = getattr(module, "__file__", None)
        if (
            file
            and file.endswith(".py")
            and pattern.search(Path(file).read_text(encoding="utf-8"))
        ):
            return module
    raise LookupError(f"no module of {package} writes {cls.__qualname__}")


def class_source(cls: type) -> str:
    """What `inspect.getsource` gave before ``__module__`` moved: decorators on."""
    file = written_in(cls).__file__
    assert file is not None
    text = Path(file).read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = text.splitlines(keepends=True)
            return "".join(lines[first - 1 : node.end_lineno])
    raise LookupError(cls.__qualname__)  # pragma: no cover - written_in found it


class WrittenHere(doctest.DocTestFinder):
    """A finder that takes the examples of what a module writes, where it is written.

    `doctest` keeps a class whose ``__module__`` is the module under test; an
    exported class now says its public module, so its examples (and its
    methods') are found with the private module that writes it, and run in
    that module's globals, as before.
    """

    def _from_module(self, module: ModuleType | None, obj: object) -> bool:
        if module is None:
            return True
        found = obj
        if isinstance(found, property):
            found = cast("object", found.fget)
        if type(found) in (staticmethod, classmethod):
            found = cast("object", getattr(found, "__func__"))  # noqa: B009
        if inspect.isfunction(found):
            return found.__globals__ is vars(module)
        if inspect.isclass(found):
            home = written_in_or_none(found)
            if home is None:  # a nested class: its __module__ was never moved
                return found.__module__ == module.__name__
            return home is module
        # Anything else (a descriptor of C code, a property without a getter).
        return getattr(found, "__module__", None) in (None, module.__name__)


def written_in_or_none(cls: type) -> ModuleType | None:
    """`written_in`, or None for a class no module of its package writes on top."""
    try:
        return written_in(cls)
    except LookupError:
        return None


def run_examples(module: ModuleType, *, optionflags: int = 0) -> doctest.TestResults:
    """What `doctest.testmod` does, with the examples `WrittenHere` finds."""
    runner = doctest.DocTestRunner(optionflags=optionflags)
    for test in WrittenHere().find(module, module.__name__):
        # A fresh context: every context variable at its default, whatever an
        # earlier test left set in this thread.
        contextvars.Context().run(runner.run, test)
    return doctest.TestResults(runner.failures, runner.tries)
