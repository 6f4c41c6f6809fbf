"""An answer kept while it passes (`Capture`), and a kept answer sent again."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, cast

from mediator._asgi.types import Message, Receive, Send
from mediator._behaviors.idempotency.store import StoredOutcome

__all__ = [
    "HTTP_TYPE_NAME",
    "REPLAYED_HEADER",
    "Capture",
    "replay_kept",
    "replaying",
]

REPLAYED_HEADER: Final = "Idempotent-Replayed"
"""Set to ``true`` on an answer replayed from the store."""

HTTP_TYPE_NAME: Final = "http"
"""The `StoredOutcome.type_name` of the answers this middleware keeps."""


# "Try again" answers: keeping one would replay it to every retry. 409 is among
# them: it is also what a concurrent duplicate gets from the mediator's own
# IdempotencyBehavior, whose stored outcome answers the retry anyway.
_TRANSIENT: Final = frozenset({408, 409, 425, 429})
# No such route (or not with this method): keeping the answer would only let
# anyone fill the store with keys to paths that do not exist.
_UNROUTED: Final = frozenset({404, 405})


@dataclass
class Capture:
    """Passes the app's answer on, keeping a copy of it while it is small.

    The answer is settled (`settle`: kept, or the key given back) before its
    last body message is passed on: a duplicate sent the moment the caller
    has the whole answer finds it kept, not still being processed.
    """

    downstream: Send
    limit: int
    kept_headers: frozenset[bytes]
    settle: Callable[[StoredOutcome | None], Awaitable[None]]
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    chunks: list[bytes] = field(default_factory=list[bytes])
    size: int = 0
    complete: bool = False
    too_large: bool = False
    settled: bool = False

    async def send(self, message: Message) -> None:
        """Record `message`, settle the answer if it is the last, pass it on."""
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            for name, value in message.get("headers", ()):
                lower = bytes(name).lower()
                if lower in self.kept_headers:
                    self.headers.append(
                        (lower.decode("latin-1"), bytes(value).decode("latin-1"))
                    )
        elif message["type"] == "http.response.body" and not self.complete:
            self.complete = not message.get("more_body", False)
            chunk = bytes(message.get("body", b""))
            self.size += len(chunk)
            if self.size > self.limit:
                self.too_large = True
                self.chunks.clear()
            else:
                self.chunks.append(chunk)
            if self.complete:
                self.settled = True
                await self.settle(self.outcome())
        await self.downstream(message)

    def outcome(self) -> StoredOutcome | None:
        """The answer to keep; None when it is not one to replay."""
        status = self.status
        if (
            status is None
            or not self.complete
            or self.too_large
            or not 200 <= status < 500
            or status in _TRANSIENT
            or status in _UNROUTED
        ):
            return None
        payload = {
            "status": status,
            "headers": [list(pair) for pair in self.headers],
            "body": base64.b64encode(b"".join(self.chunks)).decode("ascii"),
        }
        return StoredOutcome(
            kind="response",
            type_name=HTTP_TYPE_NAME,
            payload=json.dumps(payload, separators=(",", ":")),
        )


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body read already, then the caller's."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def replay_kept(send: Send, outcome: StoredOutcome) -> None:
    """Send the kept answer again, marked as a replay."""
    try:
        if outcome.kind != "response" or outcome.type_name != HTTP_TYPE_NAME:
            raise ValueError(outcome.type_name)
        payload = cast("dict[str, object]", json.loads(outcome.payload))
        status = payload["status"]
        pairs = cast("list[list[str]]", payload["headers"])
        body = base64.b64decode(cast("str", payload["body"]), validate=True)
        if not isinstance(status, int):
            raise TypeError(type(status).__name__)
        headers = [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs
        ]
    except (ValueError, TypeError, KeyError, binascii.Error) as error:
        raise RuntimeError(
            "the answer stored for this idempotency key is not one "
            "IdempotencyKeyMiddleware kept"
        ) from error
    headers += [
        (b"content-length", str(len(body)).encode("ascii")),
        (REPLAYED_HEADER.lower().encode("ascii"), b"true"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
