"""`MediatorModule`: registering handlers and behaviors with injector."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self

from injector import Binder, Injector, InstanceProvider, Module, provider, singleton

from mediator._behaviors.audit import AuditBehavior, AuditSink, LoggingAuditSink
from mediator._behaviors.authorization import AuthorizationBehavior
from mediator._behaviors.fallback.behavior import FallbackBehavior
from mediator._behaviors.idempotency.behavior import IdempotencyBehavior
from mediator._behaviors.transaction.behavior import TransactionBehavior
from mediator._behaviors.validation import (
    ValidationBehavior,
    Validator,
    ValidatorRegistry,
    validated_type,
)
from mediator._core.clock import Clock, SystemClock
from mediator._core.context import ContextPrincipalProvider, PrincipalProvider
from mediator._core.handlers import HandlerInfo, inspect_handler
from mediator._dispatch.discovery import find_handlers, find_validators, walk_modules
from mediator._dispatch.mediator import Mediator, Settings, build_mediator

__all__ = [
    "BehaviorRegistration",
    "MediatorConfig",
    "MediatorModule",
    "register_behavior",
]


DEFAULT_BEHAVIORS: tuple[type[Any], ...] = (
    AuditBehavior,
    ValidationBehavior,
    AuthorizationBehavior,
    FallbackBehavior,
    IdempotencyBehavior,
    TransactionBehavior,
)


@dataclass(frozen=True, slots=True)
class BehaviorRegistration:
    """One entry of the behavior multibinding.

    `behavior` is a behavior class (built by the injector) or a ready instance.
    """

    behavior: Any


def register_behavior(binder: Binder, behavior: type[Any] | object) -> None:
    """Add a behavior to the mediator's chain from any injector `Module`.

    This is how another package contributes a behavior without `mediator`
    importing it. Under `use_defaults()` the chain is ordered by stage; in a
    hand-wired chain, registration order decides (first is outermost), and
    modules register in the order the injector configures them.

    Example:
        >>> from injector import Module
        >>> class TimingModule(Module):
        ...     def configure(self, binder):
        ...         register_behavior(binder, Timing)  # doctest: +SKIP
    """
    binder.multibind(list[BehaviorRegistration], to=[BehaviorRegistration(behavior)])


class MediatorConfig:
    """Collects handlers and behaviors; passed to the `MediatorModule` callback.

    Every method returns the configuration, so calls chain.
    """

    def __init__(self) -> None:
        self._handlers: dict[type[Any], HandlerInfo] = {}
        self._sources: list[str] = []
        self._behaviors: list[type[Any] | object] = []
        self._validators: list[type[Any]] = []
        self._ordered_by_stage = False

    def register_from(self, *targets: ModuleType | str) -> Self:
        """Register every handler defined in these modules or packages.

        Packages are searched recursively through their subpackages. Modules
        can be given as objects or dotted names.

        Raises:
            TypeError: A target is not a module or a module name.
            ImportError: A module could not be imported.
        """
        for target in targets:
            for module in walk_modules(target):
                for cls in find_handlers(module):
                    self._add(cls)
                for cls in find_validators(module):
                    self._add_validator(cls)
            name = target if isinstance(target, str) else target.__name__
            if name not in self._sources:
                self._sources.append(name)
        return self

    def add_handler(self, *handlers: type[Any]) -> Self:
        """Register handler classes one by one.

        Raises:
            TypeError: A class is not a concrete handler.
        """
        for cls in handlers:
            self._add(cls)
            if cls.__module__ not in self._sources:
                self._sources.append(cls.__module__)
        return self

    def add_validator(self, *validators: type[Validator[Any]]) -> Self:
        """Register `Validator` classes one by one.

        Raises:
            TypeError: A class is not a concrete validator naming its request type.
        """
        for cls in validators:
            validated_type(cls)  # fails early, naming the class
            self._add_validator(cls)
        return self

    def add_behavior(self, *behaviors: type[Any] | object) -> Self:
        """Add behaviors (classes built by the injector, or instances) to the chain."""
        self._behaviors.extend(behaviors)
        return self

    def use_defaults(self) -> Self:
        """Install the built-in behaviors and order the chain by `Stage`.

        Adds `AuditBehavior`, `ValidationBehavior`, `AuthorizationBehavior`,
        `FallbackBehavior`, `IdempotencyBehavior` and `TransactionBehavior`,
        and orders every behavior (these, yours, and those other modules
        register) by stage, whatever the registration order: audit,
        validation, authorization, fallback and idempotency run once per
        request, retry sits inside them and outside the transaction.
        """
        self._ordered_by_stage = True
        for behavior in DEFAULT_BEHAVIORS:
            if behavior not in self._behaviors:
                self._behaviors.append(behavior)
        return self

    def _add(self, cls: type[Any]) -> None:
        if cls not in self._handlers:
            self._handlers[cls] = inspect_handler(cls)

    def _add_validator(self, cls: type[Any]) -> None:
        if cls not in self._validators:
            self._validators.append(cls)

    def settings(self) -> Settings:
        """What was registered, as `MediatorModule` builds the mediator from it."""
        return Settings(
            tuple(self._handlers.values()),
            tuple(self._sources),
            self._ordered_by_stage,
            tuple(self._validators),
            tuple(self._behaviors),
        )


class MediatorModule(Module):
    """The injector module that provides `Mediator`.

    Args:
        configure: Called once with a `MediatorConfig` to register handlers and
            behaviors. Its return value is ignored.

    The mediator is built, and everything a first send would trip on is
    checked, when the injector first provides it.

    Example:
        >>> from injector import Injector
        >>> module = MediatorModule(lambda m: m.register_from("app.features"))
        >>> mediator = Injector([module]).get(Mediator)  # doctest: +SKIP

    Raises:
        TypeError: A handler registered by `configure` is not a usable handler.
    """

    def __init__(
        self, configure: Callable[[MediatorConfig], object] | None = None
    ) -> None:
        config = MediatorConfig()
        if configure is not None:
            configure(config)
        self._settings = config.settings()

    def configure(self, binder: Binder) -> None:
        """Bind the settings, the defaults, and this module's behaviors."""
        binder.bind(Settings, to=self._settings)
        binder.bind(ValidatorRegistry, to=ValidatorRegistry(self._settings.validators))
        # Defaults a module configured earlier may already have bound; one
        # configured later replaces them (the injector keeps the last binding).
        for key, default in (
            (AuditSink, LoggingAuditSink()),
            (PrincipalProvider, ContextPrincipalProvider()),
            (Clock, SystemClock()),
        ):
            if not binder.has_binding_for(key):
                binder.bind(key, to=InstanceProvider(default))
        registrations = [BehaviorRegistration(b) for b in self._settings.behaviors]
        # Always declare the multibinding, so a chain with no behaviors still resolves.
        binder.multibind(list[BehaviorRegistration], to=registrations)

    @singleton
    @provider
    def provide_mediator(
        self,
        injector: Injector,
        settings: Settings,
        behaviors: list[BehaviorRegistration],
    ) -> Mediator:
        """Build the mediator, checking every handler and behavior first."""
        return build_mediator(injector, settings, [r.behavior for r in behaviors])
