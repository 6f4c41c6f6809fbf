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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx

from http_resilience._core.clock import Clock
from http_resilience._core.correlation import CorrelationSource
from http_resilience._core.events import HttpEventListener
from http_resilience._core.pipeline import Stamp
from http_resilience._fleet.state import SharedState
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import HttpResilienceOptions
from http_resilience._transports.client import build_async_client
from http_resilience._transports.client_arguments import check_urls
from http_resilience._transports.client_sync import build_client
from http_resilience._transports.correlation import correlation_stamp
from http_resilience._transports.transport import (
    check_deadline_header,
    refuse_second_layer,
)

__all__ = ["NamedClient", "check_shared"]

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
        if pipeline is not None:
            if options is not None:
                raise TypeError(
                    f"HTTP client {name!r}: give options= (the standard pipeline) "
                    "or pipeline= (your own), not both"
                )
            if not isinstance(pipeline, ResiliencePipeline):
                raise TypeError(
                    f"HTTP client {name!r}: pipeline must be a ResiliencePipeline, "
                    f"got {type(pipeline).__qualname__}"
                )
        elif not isinstance(options, HttpResilienceOptions):
            raise TypeError(
                f"HTTP client {name!r}: options must be HttpResilienceOptions or "
                f"None, got {type(options).__qualname__}"
            )
        check_urls(name, arguments)
        if "deadline_header" in arguments:
            check_deadline_header(arguments["deadline_header"], name)
        check_shared(arguments.get("shared"), name)
        mounts = cast("Mapping[str, object]", arguments.get("mounts") or {})
        transports = [arguments.get("transport"), *mounts.values()]
        no_async: str | None = None
        no_sync = (
            _HEDGING_IS_ASYNC if pipeline is not None and pipeline.async_only else None
        )
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
            options if pipeline is None else None,
            pipeline,
            dict(arguments),
            no_async,
            no_sync,
        )

    def build_async(
        self,
        *,
        header: str | None,
        clock: Clock | None,
        listeners: Sequence[HttpEventListener],
        correlation: CorrelationSource | None = None,
        shared: SharedState | None = None,
    ) -> httpx.AsyncClient:
        """The async client, its attempts stamped with `header` (None: no stamp).

        The id stamped is `correlation`'s when it gives a valid one (see
        `correlation_stamp`). `shared` is the factory's `SharedState`, used
        unless `add` gave the client one of its own.

        Raises:
            TypeError: The recipe has no async twin (`no_async`).
        """
        self._refuse(self.no_async, "")
        arguments, stamp = self._stamped(header, correlation, shared)
        return build_async_client(
            self.name,
            self.options,
            pipeline=self.pipeline,
            config=None,
            clock=clock,
            listeners=listeners,
            stamp=stamp,
            **arguments,
        )

    def build_sync(
        self,
        *,
        header: str | None,
        clock: Clock | None,
        listeners: Sequence[HttpEventListener],
        correlation: CorrelationSource | None = None,
        shared: SharedState | None = None,
    ) -> httpx.Client:
        """The sync twin of `build_async`.

        Raises:
            TypeError: The recipe has no sync twin (`no_sync`).
        """
        self._refuse(self.no_sync, f": ask for async_client({self.name!r})")
        arguments, stamp = self._stamped(header, correlation, shared)
        return build_client(
            self.name,
            self.options,
            pipeline=self.pipeline,
            config=None,
            clock=clock,
            listeners=listeners,
            stamp=stamp,
            **arguments,
        )

    def _stamped(
        self,
        header: str | None,
        correlation: CorrelationSource | None,
        shared: SharedState | None,
    ) -> tuple[dict[str, Any], Stamp | None]:
        """The client's arguments, and the stamp that writes `header` (None: none)."""
        arguments = dict(self.arguments)
        if shared is not None and arguments.get("shared") is None:
            arguments["shared"] = shared
        if header is None:
            return arguments, None
        return arguments, correlation_stamp(header, correlation)

    def _refuse(self, reason: str | None, hedging_hint: str) -> None:
        if reason is not None:
            hint = hedging_hint if reason == _HEDGING_IS_ASYNC else ""
            raise TypeError(f"HTTP client {self.name!r}: {reason}{hint}")
