"""`NamedClient`: one factory client's recipe, checked when added, built on demand.

The recipe is what `HttpClientFactory.add` was given: the standard pipeline's
options or a pipeline of its own, and the httpx arguments. Everything that can
be checked before a client exists is checked when the recipe is made, so a
mistake fails where the client is added; building one of its two clients
(async, sync) then only refuses the kind the recipe cannot make, with the
reason found then.

Each client's pipelines (around its transport and every mount) stamp each
attempt they send (retries and hedged copies alike) with the call's id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx

from http_resilience._clients.arguments import check_urls
from http_resilience._clients.client import build_async_client
from http_resilience._clients.client_sync import build_client
from http_resilience._core.clock import Clock
from http_resilience._core.correlation import CorrelationSource
from http_resilience._core.events import HttpEventListener
from http_resilience._fleet.state import SharedState
from http_resilience._pipelines.custom import ResiliencePipeline, awaits_fallback
from http_resilience._pipelines.standard import (
    HttpResilienceOptions,
    apply_environment,
    client_environment,
)
from http_resilience._transport.resilient import refuse_second_layer
from http_resilience._transport.resolve import (
    check_deadline_header,
    checked_options,
    checked_pipeline,
)
from http_resilience._transport.stamp import (
    check_correlation_source,
    check_header_name,
    correlation_stamp,
)

__all__ = ["FactorySettings", "NamedClient", "check_shared"]

_FALLBACK_IS_ASYNC = (
    "its pipeline's fallback is async, and a sync client cannot await it"
)
_HEDGING_IS_ASYNC = (
    "its pipeline hedges, and hedging needs an async client (a sync attempt "
    "cannot be cancelled)"
)


def check_shared(shared: object, name: str | None) -> None:
    """Raise `TypeError` unless `shared` is a `SharedState` or None."""
    if shared is None or isinstance(shared, SharedState):
        return
    where = "the HTTP client factory" if name is None else f"HTTP client {name!r}"
    raise TypeError(
        f"{where}: shared must be a SharedState or None, got "
        f"{type(shared).__qualname__}"
    )


@dataclass(frozen=True, slots=True)
class FactorySettings:
    """What a factory gives every client it builds.

    Attributes:
        header: The correlation header each attempt is stamped with; None
            stamps none.
        clock: The clients' clock; None for the system's.
        listeners: Called with every event of every client.
        correlation: Asked first for a call's correlation id.
        shared: The factory's `SharedState`, for clients `add` gave none.
    """

    header: str | None
    clock: Clock | None
    listeners: Sequence[HttpEventListener]
    correlation: CorrelationSource | None
    shared: SharedState | None

    @classmethod
    def checked(
        cls,
        header: str | None,
        clock: Clock | None,
        listeners: Sequence[HttpEventListener],
        correlation: CorrelationSource | None,
        shared: SharedState | None,
    ) -> FactorySettings:
        """The factory's arguments, checked (see `HttpClientFactory`).

        Raises:
            TypeError: `shared` is not a `SharedState`, or `correlation` is
                neither callable nor None.
            ValueError: `header` is not a header name, or one httpx sets.
        """
        check_shared(shared, None)
        return cls(
            header=None if header is None else check_header_name(header),
            clock=clock,
            listeners=tuple(listeners),
            correlation=check_correlation_source(correlation),
            shared=shared,
        )


@dataclass(frozen=True, slots=True)
class NamedClient:
    """One client of a factory: what it runs and the httpx arguments it gets.

    Attributes:
        name: The client's name.
        options: The standard pipeline's options; None with a `pipeline`.
        pipeline: The client's own pipeline; None for the standard one.
        arguments: The httpx arguments, as given to `add`.
        no_async: Why the client has no async twin; None when it has one.
        no_sync: Why it has no sync twin; None when it has one.
    """

    name: str
    options: HttpResilienceOptions | None
    pipeline: ResiliencePipeline | None
    arguments: Mapping[str, Any]
    no_async: str | None
    no_sync: str | None

    @classmethod
    def added(
        cls,
        name: str,
        options: object,
        pipeline: object,
        arguments: Mapping[str, Any],
        config: Mapping[str, Any] | None,
    ) -> NamedClient:
        """The recipe `HttpClientFactory.add` makes: its options resolved, checked.

        With neither `options` nor `pipeline`, the options are read for
        `name` from `config` and the environment; options given in code get
        the operator's environment on top; a pipeline given in code is
        refused while a client variable is set for it.

        Raises:
            ValueError: A pipeline given while a variable is set for `name`.
            pydantic.ValidationError: The configured options are invalid.
            TypeError: As `checked` raises it (so do the others it raises).
        """
        if options is None and pipeline is None:
            # from_config names the client in every error it raises.
            options = HttpResilienceOptions.from_config(config, client=name)
        elif isinstance(options, HttpResilienceOptions):
            # The operator's environment wins over options in code.
            options = apply_environment(options, client=name)
        if pipeline is not None:
            _refuse_environment(name)
        return cls.checked(name, options, pipeline, arguments)

    @classmethod
    def checked(
        cls,
        name: str,
        options: object,
        pipeline: object,
        arguments: Mapping[str, Any],
    ) -> NamedClient:
        """The recipe of client `name`, checked as far as it can be without building.

        Raises:
            TypeError: `options` and `pipeline` both given, either of the wrong
                type, or a client that can be neither async nor sync.
            ValueError: A ``deadline_header`` that is no header name, or a
                ``proxy`` of a scheme httpx cannot proxy through.
            httpx.InvalidURL: A ``base_url`` or ``proxy`` that does not parse
                (named so, never quoted).
            ResilienceLayerError: ``transport`` or a mount is already resilient.
        """
        own = None if pipeline is None else checked_pipeline(pipeline, options, name)
        standard = checked_options(options, name) if own is None else None
        check_urls(name, arguments)
        if "deadline_header" in arguments:
            check_deadline_header(arguments["deadline_header"], name)
        check_shared(arguments.get("shared"), name)
        mounts = cast("Mapping[str, object]", arguments.get("mounts") or {})
        transports = [arguments.get("transport"), *mounts.values()]
        no_async: str | None = None
        no_sync = None
        if own is not None and own.async_only:
            no_sync = _FALLBACK_IS_ASYNC if awaits_fallback(own) else _HEDGING_IS_ASYNC
        for transport in transports:
            refuse_second_layer(transport, name)
            if transport is None:
                continue
            kind = type(transport).__qualname__
            if no_async is None and not isinstance(transport, httpx.AsyncBaseTransport):
                no_async = f"an async client needs async transports, got {kind}"
            if no_sync is None and not isinstance(transport, httpx.BaseTransport):
                no_sync = f"a sync client needs sync transports, got {kind}"
        if no_async is not None and no_sync is not None:
            raise TypeError(
                f"HTTP client {name!r} can be neither async ({no_async}) nor sync "
                f"({no_sync})"
            )
        return cls(
            name,
            standard,
            own,
            dict(arguments),
            no_async,
            no_sync,
        )

    def build_async(self, settings: FactorySettings) -> httpx.AsyncClient:
        """The async client, built with the factory's `settings`.

        Raises:
            TypeError: The recipe has no async twin (`no_async`).
        """
        self._refuse(self.no_async, "")
        return build_async_client(self.name, self.options, **self._building(settings))

    def build_sync(self, settings: FactorySettings) -> httpx.Client:
        """The sync twin of `build_async`.

        Raises:
            TypeError: The recipe has no sync twin (`no_sync`).
        """
        self._refuse(self.no_sync, f": ask for async_client({self.name!r})")
        return build_client(self.name, self.options, **self._building(settings))

    def _building(self, settings: FactorySettings) -> dict[str, Any]:
        """What the client builder takes besides the name and the options.

        The client's httpx arguments; `settings.shared` unless `add` gave the
        client a `SharedState` of its own; and the stamp that writes
        `settings.header` (None: no stamp) with `settings.correlation`'s id
        when it gives a valid one (see `correlation_stamp`).
        """
        arguments = dict(self.arguments)
        if settings.shared is not None and arguments.get("shared") is None:
            arguments["shared"] = settings.shared
        header = settings.header
        stamp = (
            None if header is None else correlation_stamp(header, settings.correlation)
        )
        return {
            **arguments,
            "pipeline": self.pipeline,
            "config": None,
            "clock": settings.clock,
            "listeners": settings.listeners,
            "stamp": stamp,
        }

    def _refuse(self, reason: str | None, hedging_hint: str) -> None:
        if reason is not None:
            hint = hedging_hint if reason == _HEDGING_IS_ASYNC else ""
            raise TypeError(f"HTTP client {self.name!r}: {reason}{hint}")


def _refuse_environment(name: str) -> None:
    """Refuse client variables for a client whose pipeline was given in code.

    No variable can reach inside a `ResiliencePipeline`; ignoring the
    operator's would be the silent surprise this refuses.

    Raises:
        ValueError: Naming the variables and what to do.
    """
    variables = client_environment(os.environ, name)
    if variables:
        raise ValueError(
            f"HTTP client {name!r} runs a pipeline given in code, which the "
            f"environment cannot change, but {', '.join(variables)} "
            f"{'is' if len(variables) == 1 else 'are'} set for it: unset "
            f"{'it' if len(variables) == 1 else 'them'}, or give the client "
            "options instead of a pipeline"
        )
