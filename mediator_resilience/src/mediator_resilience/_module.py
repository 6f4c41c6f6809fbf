"""`ResilienceMediatorModule`: adds `RetryBehavior` to the mediator's chain."""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from injector import Binder, Module

from mediator import ConfigurationError, register_behavior
from mediator_resilience._behavior import RetryBehavior, RetryTools
from mediator_resilience._events import RetryListener
from mediator_resilience._options import (
    ResilienceMediatorOptions,
    apply_environment,
)
from mediator_resilience._primitives.clock import Clock, SystemClock
from mediator_resilience._primitives.config import check_sections

__all__ = ["ResilienceMediatorModule"]


class ResilienceMediatorModule(Module):
    """Registers the process's one mediator retry pipeline.

    Add it beside `MediatorModule`; under `use_defaults()` the retry behavior
    lands between authorization and the transaction whatever the module order.

    Args:
        options: The options in code; when given, `config`'s section is not
            read, but ``RESILIENCE__MEDIATOR__...`` environment variables still
            apply on top of them (the operator wins).
        config: The whole configuration mapping; its ``resilience.mediator``
            section and ``RESILIENCE__MEDIATOR__...`` environment variables give
            the options. Used when `options` is None (defaults otherwise).
            A key under ``resilience`` that is no known section is refused.
        clock: Where waits happen; `SystemClock` by default, `FakeClock` in tests.
        random: Returns a float in [0, 1) for the jitter; default a fresh
            `random.Random`'s `random`. The same parameter as in
            `http_resilience` (`StreamRetryOptions`, the transports): a draw
            outside [0, 1) ends the retry with a `ValueError` naming it.
        listeners: Called with a `RetryEvent` before every wait.
        remaining_time: Optional: the seconds left before a deadline the retry
            must keep, or None when there is none; for example
            `http_resilience.remaining_time`, the deadline of the request
            being served. No retry and no wait starts past it.

    Raises:
        pydantic.ValidationError: An invalid option, named, on this call; one
            from the environment names its variable.
        ValueError: `config` has a key under ``resilience`` that is no known
            section (``resilience.mediatr``), named with the nearest one.
        TypeError: `options` is not a `ResilienceMediatorOptions`.

    Example:
        >>> from injector import Injector
        >>> from mediator import Mediator, MediatorModule
        >>> injector = Injector([
        ...     MediatorModule(lambda m: m.register_from("app").use_defaults()),
        ...     ResilienceMediatorModule(config={"resilience": {"mediator": {}}}),
        ... ])  # doctest: +SKIP
    """

    def __init__(
        self,
        options: ResilienceMediatorOptions | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        listeners: Sequence[RetryListener] = (),
        remaining_time: Callable[[], float | None] | None = None,
    ) -> None:
        if options is None:
            options = ResilienceMediatorOptions.from_config(config)
        elif not isinstance(options, ResilienceMediatorOptions):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                "options must be a ResilienceMediatorOptions, "
                f"got {type(options).__qualname__}"
            )
        else:
            # The operator's environment wins over options in code, as over
            # the configuration section; the section is not read then.
            check_sections(config)
            options = apply_environment(options)
        self.options = options
        if random is None:
            random = _random.Random().random
        if remaining_time is not None and not callable(remaining_time):
            raise TypeError(
                "remaining_time must be a callable answering the seconds left "
                f"(or None), got {type(remaining_time).__qualname__}"
            )
        self._tools = RetryTools(
            clock or SystemClock(), random, tuple(listeners), remaining_time
        )

    def configure(self, binder: Binder) -> None:
        """Bind the options (once per injector) and add the behavior.

        Raises:
            ConfigurationError: A second retry pipeline in the same injector.
        """
        if binder.has_binding_for(ResilienceMediatorOptions):
            raise ConfigurationError(
                "a mediator retry pipeline is already registered: there is one per "
                "process, so install ResilienceMediatorModule once"
            )
        binder.bind(ResilienceMediatorOptions, to=self.options)
        binder.bind(RetryTools, to=self._tools)
        # The class, built by the injector from plain instances: the mediator can
        # see it reaches no request-scoped service, so no send opens a scope for it.
        register_behavior(binder, RetryBehavior)
