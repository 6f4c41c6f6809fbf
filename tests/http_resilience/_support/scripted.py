"""Small recording fakes for the transport tests: a scripted server and a listener."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from http_resilience import (
    AsyncResilientTransport,
    HttpEvent,
    HttpResilienceOptions,
    ResilientTransport,
)
from http_resilience.testing import EventRecorder, FakeClock

E = TypeVar("E")

URL = "http://api.example/orders/1"


class TrackedStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that remembers whether it was closed."""

    def __init__(self, body: bytes = b"{}") -> None:
        self.body = body
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield self.body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status with headers."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict[str, str])


Outcome = int | Reply | BaseException


@dataclass
class Script:
    """A `MockTransport` handler answering from a script; the last answer repeats.

    Records every request it received, its body and its extensions as they
    were when it arrived, the response body streams it handed out, and, at
    each request, which earlier bodies were closed by then.
    """

    outcomes: Sequence[Outcome]
    requests: list[httpx.Request] = field(default_factory=list[httpx.Request])
    extensions: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    bodies: list[bytes] = field(default_factory=list[bytes])
    streams: list[TrackedStream] = field(default_factory=list[TrackedStream])
    closed_before: list[list[bool]] = field(default_factory=list[list[bool]])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.closed_before.append([stream.closed for stream in self.streams])
        self.requests.append(request)
        self.extensions.append(dict(request.extensions))
        self.bodies.append(request.content)
        outcome = self.outcomes[min(len(self.requests), len(self.outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        reply = outcome if isinstance(outcome, Reply) else Reply(outcome)
        stream = TrackedStream(f'{{"attempt": {len(self.requests)}}}'.encode())
        self.streams.append(stream)
        return httpx.Response(reply.status, headers=dict(reply.headers), stream=stream)

    @property
    def hits(self) -> int:
        return len(self.requests)


def script(*outcomes: Outcome) -> Script:
    return Script(list(outcomes))


def options(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(values)


def no_jitter() -> float:
    """The jitter draw that makes each delay exactly half the exponential one."""
    return 0.0


def async_transport(
    handler: Any,
    clock: FakeClock,
    *,
    events: EventRecorder[HttpEvent] | None = None,
    name: str = "orders",
    **values: Any,
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name=name,
        clock=clock,
        listeners=[events] if events is not None else [],
        random=no_jitter,
    )


def sync_transport(
    handler: Any,
    clock: FakeClock,
    *,
    events: EventRecorder[HttpEvent] | None = None,
    name: str = "orders",
    **values: Any,
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name=name,
        clock=clock,
        listeners=[events] if events is not None else [],
        random=no_jitter,
    )
