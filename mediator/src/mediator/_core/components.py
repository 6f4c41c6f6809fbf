"""`Component`: a user's class that a built-in behavior builds and calls per send.

A policy (`AuthorizationBehavior`) and a validator (`ValidationBehavior`) are
alike: a class built by the mediator's resolver, with one method that may be
``async def`` or a plain ``def``. Each is prepared once per class, and on
``send_sync`` an async one is refused by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mediator._core.errors import SyncPathError
from mediator._core.wiring import Wiring

__all__ = ["Component", "component", "type_of"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Component(Generic[T]):
    """One class, ready to build: what it is, whether its method is async, how.

    Attributes:
        cls: The class.
        described: Its kind and name for messages, as ``"policy OwnsOrder
            (module app.orders)"``.
        method: The method a behavior calls, as ``"allows"``.
        is_async: Whether `method` is ``async def``.
        make: Builds an instance (through the mediator's resolver).
    """

    cls: type[T]
    described: str
    method: str
    is_async: bool
    make: Callable[[], T]

    def make_sync(self) -> T:
        """An instance for the sync path.

        Raises:
            SyncPathError: Its method is async, so ``send_sync`` cannot run it.
        """
        if self.is_async:
            raise SyncPathError(
                f"{self.described} is async, so send_sync cannot run it: await "
                f"mediator.send(...) instead, or make {self.method}() a plain def"
            )
        return self.make()


def component(
    resolver: Wiring, cls: type[T], *, kind: str, method: str
) -> Component[T]:
    """Prepare `cls`, a `kind` (``"policy"``) whose `method` the behavior calls.

    Raises:
        UnresolvableDependencyError: `cls` cannot be built.
    """
    described = f"{kind} {cls.__qualname__} (module {cls.__module__})"
    # The resolver compiles each class once, so asking again is a lookup.
    factory = resolver.factory(cls, context=described)
    is_async = inspect.iscoroutinefunction(getattr(cls, method))
    return Component(cls, described, method, is_async, factory.make)


def type_of(request: object) -> type[object]:
    """The class of `request`, typed for the per-class caches the behaviors keep."""
    return type(request)
