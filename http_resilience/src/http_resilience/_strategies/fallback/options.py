"""The fallback's step: the function `ResiliencePipeline.add_fallback` was given.

The function is checked when it is added, not at the first failure: it must
be callable with the request and the failure. An async function (detected
then, once) makes the pipeline async-only, as hedging does.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, cast

from http_resilience._core.arguments import is_async_callable
from http_resilience._core.builder import BuildContext
from http_resilience._core.step_defaults import StepDefaults, SyncStepDefaults
from http_resilience._strategies.fallback.strategy import (
    AsyncFallback,
    AsyncFallbackFunction,
    FallbackFunction,
    FallbackStrategy,
    SyncFallback,
)

__all__ = ["AsyncFallbackStep", "FallbackStep", "fallback_step"]


def fallback_step(function: object) -> FallbackStep | AsyncFallbackStep:
    """The step for `function`: sync, or async-only when it is async.

    Raises:
        TypeError: `function` is not callable, or cannot be called with two
            positional arguments (the request and the failure).
    """
    if not callable(function):
        raise TypeError(
            "add_fallback: the fallback must be a function of the request and "
            f"the failure, got {type(function).__qualname__}"
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin that hides its signature
        signature = None
    if signature is not None:
        try:
            signature.bind(None, None)
        except TypeError:
            name = getattr(function, "__name__", type(function).__name__)
            raise TypeError(
                f"add_fallback: the fallback is called as fn(request, failure), "
                f"but {name}{signature} cannot be called so"
            ) from None
    if is_async_callable(function):
        return AsyncFallbackStep(cast("AsyncFallbackFunction", function))
    return FallbackStep(cast("FallbackFunction", function))


@dataclass(frozen=True, slots=True)
class AsyncFallbackStep(StepDefaults):
    """A fallback whose function is async: an async client's only."""

    function: AsyncFallbackFunction

    _label = "async fallback"
    _async_driver = AsyncFallback

    def _strategy(self, context: BuildContext) -> Any:
        return FallbackStrategy(self.function, context.telemetry)


@dataclass(frozen=True, slots=True)
class FallbackStep(SyncStepDefaults):
    """A fallback whose function is sync: for a sync or an async client."""

    function: FallbackFunction

    _label = "fallback"
    _async_driver = AsyncFallback
    _sync_driver = SyncFallback

    def _strategy(self, context: BuildContext) -> Any:
        return FallbackStrategy(self.function, context.telemetry)
