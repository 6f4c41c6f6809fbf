"""A resilient transport's arguments, checked and resolved before it builds.

What `AsyncResilientTransport`, `ResilientTransport`, the client builders and
a factory's `NamedClient` all check the same way, with the same messages:
options or a pipeline (not both), the ``deadline_header``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from http_resilience._core.arguments import of_type
from http_resilience._core.clock import SYSTEM_CLOCK, Clock, reader
from http_resilience._core.raw_headers import is_token
from http_resilience._core.send import DeadlineTeller, deadline_teller
from http_resilience._pipelines.custom import ResiliencePipeline, awaits_fallback
from http_resilience._pipelines.standard import (
    HttpResilienceOptions,
    apply_environment,
)

__all__ = [
    "check_deadline_header",
    "checked_options",
    "checked_pipeline",
    "resolve_options",
    "resolve_pipeline",
    "teller",
]


def checked_pipeline(
    pipeline: object, options: object, name: str, config: object = None
) -> ResiliencePipeline:
    """`pipeline`, refused beside `options` (or `config`) or of a wrong type.

    Raises:
        TypeError: `options` or `config` given as well, or `pipeline` is not a
            `ResiliencePipeline` (named `name`).
    """
    if options is not None:
        raise TypeError(
            f"HTTP client {name!r}: give options= (the standard pipeline) or "
            "pipeline= (your own), not both"
        )
    if config is not None:
        raise TypeError(
            f"HTTP client {name!r}: config= configures the standard pipeline; "
            "a pipeline= carries its own options"
        )
    return of_type(
        pipeline,
        ResiliencePipeline,
        f"HTTP client {name!r}: pipeline must be a ResiliencePipeline",
    )


def checked_options(options: object, name: str) -> HttpResilienceOptions:
    """`options`, refused unless they are `HttpResilienceOptions`.

    Raises:
        TypeError: They are of another type (named `name`).
    """
    return of_type(
        options,
        HttpResilienceOptions,
        f"HTTP client {name!r}: options must be HttpResilienceOptions or None",
    )


def teller(header: object, clock: Clock | None, name: str) -> DeadlineTeller | None:
    """What writes the attempt's time left into `header`; None for no header.

    Raises:
        TypeError: `header` is neither None nor a string.
        ValueError: `header` is not an HTTP header name.
    """
    checked = check_deadline_header(header, name)
    if checked is None:
        return None
    return deadline_teller(checked, reader(clock or SYSTEM_CLOCK))


def check_deadline_header(header: object, name: str) -> str | None:
    """`header`, checked as client `name`'s ``deadline_header``.

    Raises:
        TypeError: `header` is neither None nor a string.
        ValueError: `header` is not an HTTP header name.
    """
    if header is None:
        return None
    header = of_type(
        header,
        str,
        f"HTTP client {name!r}: deadline_header must be a header name or None",
    )
    if not is_token(header):
        raise ValueError(
            f"HTTP client {name!r}: deadline_header {header!r} is not an HTTP "
            "header name"
        )
    return header


def resolve_options(
    options: object, config: Mapping[str, Any] | None, name: str
) -> HttpResilienceOptions:
    """`options`, or the client's options read from `config` and the environment.

    Raises:
        TypeError: `options` is neither None nor `HttpResilienceOptions`.
        pydantic.ValidationError: The configuration is invalid (names `name`).
    """
    if options is None:
        return HttpResilienceOptions.from_config(config, client=name)
    # The operator's environment variables apply on top of options in code.
    return apply_environment(checked_options(options, name), client=name)


def resolve_pipeline(
    pipeline: object, options: object, config: object, name: str, *, sync: bool
) -> ResiliencePipeline:
    """`pipeline`, checked for the transport it goes to.

    Raises:
        TypeError: `options` or `config` given as well (they configure the
            standard pipeline), `pipeline` is not a `ResiliencePipeline`, or it
            hedges or has an async fallback and the client is sync.
    """
    pipeline = checked_pipeline(pipeline, options, name, config)
    if sync and pipeline.async_only:
        if awaits_fallback(pipeline):
            raise TypeError(
                f"HTTP client {name!r}: the pipeline's fallback is async; a sync "
                "client cannot await it (give a sync function, or use an async "
                "client)"
            )
        raise TypeError(
            f"HTTP client {name!r}: hedging needs an async client; a sync "
            "attempt cannot be cancelled, so a hedge's loser would run to its end"
        )
    return pipeline
