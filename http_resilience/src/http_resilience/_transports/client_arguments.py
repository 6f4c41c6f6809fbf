"""What the two client builders share: splitting httpx's arguments, checking options.

`client.py` builds the async client (its sync twin, `client_sync.py`, is
generated from it by tools/unasync.py); the checks here are the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from http_resilience._strategies.pipeline import ResiliencePipeline
from http_resilience._strategies.standard import HttpResilienceOptions
from http_resilience._transports.transport import (
    refuse_second_layer,
    resolve_options,
    resolve_pipeline,
)

__all__ = ["TRANSPORT_ARGUMENTS", "resolve", "split_arguments"]

# The client's arguments that configure the transport it would build itself.
# `proxy` above all: given to the client, it would mount a proxy transport that
# bypasses the pipeline.
TRANSPORT_ARGUMENTS: Final = ("verify", "cert", "http1", "http2", "limits", "proxy")


def split_arguments(
    name: str, httpx_kwargs: dict[str, Any]
) -> tuple[object, dict[str, Any], dict[str, object]]:
    """Take the transport, its building arguments and the mounts out of `httpx_kwargs`.

    Returns:
        ``transport=`` (None: build one), the arguments to build it with, and
        ``mounts=``; what is left in `httpx_kwargs` goes to the client.
    """
    transport: object = httpx_kwargs.pop("transport", None)
    refuse_second_layer(transport, name)
    building: dict[str, Any] = {}
    if transport is not None and httpx_kwargs.get("proxy") is not None:
        # httpx would mount a proxy transport of its own, around the pipeline.
        raise TypeError(
            f"HTTP client {name!r}: proxy= goes to the transport you pass as "
            "transport=, not to the client"
        )
    if transport is None:
        for argument in TRANSPORT_ARGUMENTS:
            if argument in httpx_kwargs:
                building[argument] = httpx_kwargs.pop(argument)
        if "trust_env" in httpx_kwargs:
            building["trust_env"] = httpx_kwargs["trust_env"]
    mounts: dict[str, object] = dict(httpx_kwargs.pop("mounts", None) or {})
    for mounted in mounts.values():
        refuse_second_layer(mounted, name)
    return transport, building, mounts


def resolve(
    options: object, pipeline: object, config: object, name: str, *, sync: bool
) -> tuple[HttpResilienceOptions | None, ResiliencePipeline | None]:
    """The standard pipeline's options, or the custom pipeline: checked once."""
    if pipeline is None:
        return resolve_options(
            options, cast("Mapping[str, Any] | None", config), name
        ), None
    return None, resolve_pipeline(pipeline, options, config, name, sync=sync)
