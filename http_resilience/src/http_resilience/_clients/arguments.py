"""What the two client builders share: splitting httpx's arguments, checking options.

`client.py` builds the async client (its sync twin, `client_sync.py`, is
generated from it by tools/unasync.py); the checks here are the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

import httpx

from http_resilience._core.hosts import UNPARSEABLE_URL, safe_target
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import HttpResilienceOptions
from http_resilience._transport.resilient import refuse_second_layer
from http_resilience._transport.resolve import resolve_options, resolve_pipeline

__all__ = ["TRANSPORT_ARGUMENTS", "check_urls", "resolve", "split_arguments"]

# The client's arguments that configure the transport it would build itself.
# `proxy` above all: given to the client, it would mount a proxy transport that
# bypasses the pipeline.
TRANSPORT_ARGUMENTS: Final = ("verify", "cert", "http1", "http2", "limits", "proxy")

_PROXY_SCHEMES: Final = ("http", "https", "socks5", "socks5h")


def check_urls(name: str, httpx_kwargs: Mapping[str, Any]) -> None:
    """Refuse a ``base_url`` or ``proxy`` httpx would refuse, naming its host only.

    httpx's own errors quote the part of the URL they choke on, or the whole
    proxy URL, query included; a password or a token there would be logged
    with the error.

    Raises:
        httpx.InvalidURL: The URL does not parse.
        ValueError: The proxy's scheme is none httpx proxies through.
    """
    for argument in ("base_url", "proxy"):
        value: object = httpx_kwargs.get(argument)
        if not isinstance(value, str | httpx.URL):
            continue  # None, an httpx.Proxy (parsed already), or httpx's to refuse
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL:
            raise httpx.InvalidURL(
                f"HTTP client {name!r}: {argument}= is an {UNPARSEABLE_URL}"
            ) from None
        if argument == "proxy" and url.scheme not in _PROXY_SCHEMES:
            raise ValueError(
                f"HTTP client {name!r}: proxy= {safe_target(url)} is no proxy: "
                "give an http, https, socks5 or socks5h URL"
            )


def split_arguments(
    name: str, httpx_kwargs: dict[str, Any]
) -> tuple[object, dict[str, Any], dict[str, object]]:
    """Take the transport, its building arguments and the mounts out of `httpx_kwargs`.

    Returns:
        ``transport=`` (None: build one), the arguments to build it with, and
        ``mounts=``; what is left in `httpx_kwargs` goes to the client.
    """
    check_urls(name, httpx_kwargs)
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
