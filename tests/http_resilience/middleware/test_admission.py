"""`AdmissionMiddleware`: direct ASGI calls and httpx's `ASGITransport`, a fake clock.

The app under it holds each request until the test lets it go, so the tests
say exactly how many requests are inside; time passes only by `FakeClock`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Awaitable, Callable, Hashable, MutableMapping
from random import Random
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from http_resilience import AdaptiveLimiterOptions, ConcurrencyLimiterOptions
from http_resilience._middleware.admission import READ_AHEAD
from http_resilience.asgi import AdmissionHealth, AdmissionMiddleware
from http_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

OVERLOADED = "This service is at its limit of concurrent requests. Try again later."
OVER_SHARE = (
    "This caller is at its share of this service's concurrent requests. "
    "Try again later."
)


class HeldApp:
    """Holds each request until `release` lets it go; answers its status."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.entered: list[str] = []
        self.bodies: dict[str, bytes] = {}
        self.inside = 0
        self._gate = anyio.Event()
        self.clock = clock
        self.service_time = 0.0
        self.status = 200
        self.error: Exception | None = None
        self.hold = True

    def release(self) -> None:
        self._gate.set()
        self._gate = anyio.Event()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        path = scope["path"]
        self.entered.append(path)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies[path] = body
        self.inside += 1
        try:
            if self.hold:
                await self._gate.wait()
            if self.clock is not None and self.service_time:
                self.clock.advance(self.service_time)
        finally:
            self.inside -= 1
        if self.error is not None:
            raise self.error
        await send({"type": "http.response.start", "status": self.status})
        await send({"type": "http.response.body", "body": b"done"})


class Answer:
    """What the middleware sent for one request."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.done = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {
                bytes(k).decode(): bytes(v).decode()
                for k, v in message.get("headers", ())
            }
        else:
            self.body += message.get("body", b"")
            if not message.get("more_body", False):
                self.done = True

    def problem(self) -> dict[str, Any]:
        assert self.headers["content-type"] == "application/problem+json"
        document: dict[str, Any] = json.loads(self.body)
        return document


def scope_for(path: str = "/", tenant: str | None = None) -> Message:
    scope: Message = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "server": ("service", 80),
        "client": ("127.0.0.1", 5000),
    }
    if tenant is not None:
        scope["state"] = {"tenant": tenant}
    return scope


def by_tenant(scope: MutableMapping[str, Any]) -> Hashable | None:
    state = scope.get("state")
    return None if state is None else state["tenant"]


def empty_body() -> Receive:
    sent = False
    gone = anyio.Event()

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()  # never set: the caller stays
        return {"type": "http.disconnect"}

    return receive


async def call(
    middleware: AdmissionMiddleware,
    path: str = "/",
    tenant: str | None = None,
    receive: Receive | None = None,
) -> Answer:
    answer = Answer()
    await middleware(scope_for(path, tenant), receive or empty_body(), answer.send)
    return answer


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until `condition` holds (bounded by a count)."""
    for _ in range(10_000):
        if condition():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("the condition never held")


def queued_is(middleware: AdmissionMiddleware, count: int) -> Callable[[], bool]:
    return lambda: middleware.health().queued == count


def entered(app: HeldApp, count: int) -> Callable[[], bool]:
    return lambda: len(app.entered) == count


def admission(
    app: HeldApp | Callable[[Message, Receive, Send], Awaitable[None]],
    clock: FakeClock | None = None,
    **options: Any,
) -> AdmissionMiddleware:
    partition = options.pop("partition", None)
    share = options.pop("partition_share", 0.5)
    return AdmissionMiddleware(
        app,
        limiter=AdaptiveLimiterOptions(**options),
        partition=partition,
        partition_share=share,
        clock=clock or FakeClock(),
        random=Random(7),
    )


async def test_requests_under_the_limit_are_all_let_in() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=4)
    answers: list[Answer] = []

    async def one(path: str) -> None:
        answers.append(await call(middleware, path))

    async with anyio.create_task_group() as group:
        for index in range(4):
            group.start_soon(one, f"/{index}")
        await until(lambda: app.inside == 4)
        assert middleware.health().in_use == 4
        app.release()
    assert [answer.status for answer in answers] == [200] * 4
    assert middleware.health() == AdmissionHealth(
        limit=4,
        in_use=0,
        queued=0,
        queue_limit=0,
        baseline_rtt=0.0,
        partitions=0,
        overloaded=0,
        over_share=0,
    )


async def test_beyond_the_limit_and_its_queue_is_503_problem_json() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=2, queue_limit=1)
    answers: dict[str, Answer] = {}

    async def one(path: str) -> None:
        answers[path] = await call(middleware, path)

    async with anyio.create_task_group() as group:
        group.start_soon(one, "/a")
        group.start_soon(one, "/b")
        await until(lambda: app.inside == 2)
        group.start_soon(one, "/queued")
        await until(lambda: middleware.health().queued == 1)
        refused = await call(middleware, "/refused")
        assert refused.status == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.problem() == {
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": OVERLOADED,
        }
        assert "/refused" not in app.entered
        app.release()
        await until(lambda: len(app.entered) == 3 and app.inside == 1)
        app.release()
    assert {path: answer.status for path, answer in answers.items()} == {
        "/a": 200,
        "/b": 200,
        "/queued": 200,
    }
    assert middleware.health().overloaded == 1


async def test_no_queue_refuses_at_once() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1)
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)
        assert (await call(middleware, "/second")).status == 503
        app.release()
    assert app.entered == ["/held"]


async def test_the_retry_after_is_the_drain_at_the_learned_latency() -> None:
    clock = FakeClock()
    app = HeldApp(clock)
    app.hold = False
    app.service_time = 4.0
    middleware = admission(app, clock, initial_limit=2, min_limit=2, max_limit=2)
    for index in range(10):  # a window's samples, one a request, 4 s each
        assert (await call(middleware, f"/{index}")).status == 200
    assert middleware.health().baseline_rtt == pytest.approx(4.0)
    app.hold = True
    refused = Answer()
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/a")
        group.start_soon(call, middleware, "/b")
        await until(lambda: app.inside == 2)
        refused = await call(middleware, "/c")
        app.release()
    # Two inside and this one, two at a time, 4 s each: 6 s.
    assert refused.headers["retry-after"] == str(math.ceil(4.0 * 3 / 2))


async def test_the_queue_lets_requests_in_in_order_as_permits_come_back() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=3)
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/first")
        await until(lambda: app.inside == 1)
        for index, path in enumerate(["/second", "/third", "/fourth"], start=1):
            group.start_soon(call, middleware, path)
            await until(queued_is(middleware, index))
        for inside in range(1, 4):
            app.release()
            await until(entered(app, inside + 1))
            assert app.inside == 1
        app.release()
    assert app.entered == ["/first", "/second", "/third", "/fourth"]
    assert middleware.health().queued == 0
    assert middleware.health().in_use == 0


async def test_a_queued_caller_who_disconnects_gives_its_place_back() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=1)
    leave = anyio.Event()
    read: list[str] = []

    async def leaving() -> Message:
        if not read:
            read.append("body")
            return {"type": "http.request", "body": b"", "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    gone = Answer()
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)

        async def queued() -> None:
            await middleware(scope_for("/gone"), leaving, gone.send)

        group.start_soon(queued)
        await until(lambda: middleware.health().queued == 1)
        assert (await call(middleware, "/full")).status == 503
        leave.set()
        await until(lambda: middleware.health().queued == 0)
        group.start_soon(call, middleware, "/next")
        await until(lambda: middleware.health().queued == 1)
        app.release()
        await until(lambda: len(app.entered) == 2 and app.inside == 1)
        app.release()
    assert app.entered == ["/held", "/next"]
    assert gone.status is None  # no one to answer
    assert middleware.health().in_use == 0


async def test_a_queued_request_keeps_the_body_read_while_it_waited() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=1)
    chunks = [b"ab", b"cd", b""]

    async def body() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await anyio.Event().wait()  # the caller stays
        raise AssertionError("unreachable")

    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)
        group.start_soon(call, middleware, "/posted", None, body)
        await until(lambda: middleware.health().queued == 1 and not chunks)
        app.release()
        await until(lambda: len(app.entered) == 2 and app.inside == 1)
        app.release()
    assert app.bodies["/posted"] == b"abcd"


async def test_a_large_body_is_read_ahead_only_so_far_and_reaches_the_app_whole() -> (
    None
):
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=1)
    chunk = b"x" * (READ_AHEAD // 2 + 1)
    chunks = [chunk, chunk, chunk, b""]
    given = 0

    async def body() -> Message:
        nonlocal given
        given += 1
        part = chunks.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(chunks)}

    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)
        group.start_soon(call, middleware, "/large", None, body)
        await until(lambda: middleware.health().queued == 1 and given == 2)
        for _ in range(100):  # room to read more, which it must not
            await anyio.lowlevel.checkpoint()
        assert given == 2  # past READ_AHEAD: the rest waits where it is
        app.release()
        await until(lambda: len(app.entered) == 2 and app.inside == 1)
        app.release()
    assert app.bodies["/large"] == chunk * 3


async def test_a_caller_who_leaves_as_its_permit_comes_passes_the_permit_on() -> None:
    leave = anyio.Event()
    release = anyio.Event()
    entered: list[str] = []

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        entered.append(scope["path"])
        if scope["path"] == "/held":
            await release.wait()
            leave.set()  # the queued caller leaves as this permit comes back
        await send({"type": "http.response.start", "status": 200})
        await send({"type": "http.response.body", "body": b""})

    async def leaving() -> Message:
        await leave.wait()
        return {"type": "http.disconnect"}

    middleware = admission(app, initial_limit=1, queue_limit=2)
    gone = Answer()
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: entered == ["/held"])

        async def queued() -> None:
            await middleware(scope_for("/gone"), leaving, gone.send)

        group.start_soon(queued)
        await until(queued_is(middleware, 1))
        group.start_soon(call, middleware, "/next")
        await until(queued_is(middleware, 2))
        release.set()
    assert entered == ["/held", "/next"]
    assert gone.status is None
    health = middleware.health()
    assert (health.in_use, health.queued) == (0, 0)


async def test_a_queued_request_with_nothing_read_yet_reads_its_own_body() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=1)
    sent = anyio.Event()

    async def later() -> Message:
        await sent.wait()
        return {"type": "http.request", "body": b"late", "more_body": False}

    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)
        group.start_soon(call, middleware, "/late", None, later)
        await until(queued_is(middleware, 1))
        app.release()
        await until(lambda: len(app.entered) == 2)
        sent.set()
        await until(lambda: app.inside == 1)
        app.release()
    assert app.bodies["/late"] == b"late"


async def test_a_cancelled_queued_request_gives_its_place_back() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=1, queue_limit=1)
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/held")
        await until(lambda: app.inside == 1)
        with anyio.CancelScope() as scope:

            async def cancel_when_queued() -> None:
                await until(lambda: middleware.health().queued == 1)
                scope.cancel()

            group.start_soon(cancel_when_queued)
            await call(middleware, "/cancelled")
        assert scope.cancelled_caught
        assert middleware.health().queued == 0
        group.start_soon(call, middleware, "/next")
        await until(lambda: middleware.health().queued == 1)
        app.release()
        await until(lambda: len(app.entered) == 2 and app.inside == 1)
        app.release()
    assert app.entered == ["/held", "/next"]


async def test_a_partition_over_its_share_is_429_while_others_get_in() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=4, partition=by_tenant)
    assert middleware.share() == 2
    async with anyio.create_task_group() as group:
        group.start_soon(call, middleware, "/a1", "a")
        group.start_soon(call, middleware, "/a2", "a")
        await until(lambda: app.inside == 2)
        refused = await call(middleware, "/a3", "a")
        assert refused.status == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.problem() == {
            "type": "about:blank",
            "title": "Too Many Requests",
            "status": 429,
            "detail": OVER_SHARE,
        }
        # The refusal took no permit of the ceiling.
        assert middleware.health().in_use == 2
        group.start_soon(call, middleware, "/b1", "b")
        group.start_soon(call, middleware, "/plain")
        await until(lambda: app.inside == 4)
        assert middleware.health().partitions == 2
        # The ceiling is full now: 503, whatever the partition.
        assert (await call(middleware, "/b2", "b")).status == 503
        app.release()
    assert sorted(app.entered) == ["/a1", "/a2", "/b1", "/plain"]
    health = middleware.health()
    assert (health.over_share, health.overloaded, health.partitions) == (1, 1, 0)


async def test_a_share_of_one_lets_a_partition_take_the_whole_limit() -> None:
    app = HeldApp()
    middleware = admission(
        app, initial_limit=3, partition=by_tenant, partition_share=1.0
    )
    assert middleware.share() == 3
    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(call, middleware, f"/{index}", "a")
        await until(lambda: app.inside == 3)
        # At its share, and the share is the whole ceiling: its own 429 first.
        assert (await call(middleware, "/over", "a")).status == 429
        assert (await call(middleware, "/plain")).status == 503
        app.release()


async def test_a_partition_gets_at_least_one_permit() -> None:
    middleware = admission(HeldApp(), initial_limit=1, partition=by_tenant)
    assert middleware.share() == 1


async def test_queued_requests_count_against_their_partition() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=4, queue_limit=4, partition=by_tenant)
    async with anyio.create_task_group() as group:
        for index in range(4):
            group.start_soon(call, middleware, f"/b{index}", f"b{index}")
        await until(lambda: app.inside == 4)
        group.start_soon(call, middleware, "/a1", "a")
        group.start_soon(call, middleware, "/a2", "a")
        await until(lambda: middleware.health().queued == 2)
        assert (await call(middleware, "/a3", "a")).status == 429
        app.release()
        await until(lambda: len(app.entered) == 6 and app.inside == 2)
        app.release()
    assert middleware.health().partitions == 0


async def test_ten_thousand_made_up_keys_leave_nothing_behind() -> None:
    app = HeldApp()
    middleware = admission(app, initial_limit=4, partition=by_tenant)
    async with anyio.create_task_group() as group:
        for index in range(4):
            group.start_soon(call, middleware, f"/held{index}", f"held{index}")
        await until(lambda: app.inside == 4)
        refused = 0
        for index in range(10_000):
            answer = await call(middleware, "/flood", f"key-{index}")
            refused += answer.status == 503
            assert middleware.health().partitions == 4
        assert refused == 10_000
        app.release()
    app.hold = False
    for index in range(10_000):
        assert (await call(middleware, "/served", f"key-{index}")).status == 200
    assert middleware.health().partitions == 0
    assert not middleware._held  # pyright: ignore[reportPrivateUsage]


async def test_a_partition_that_raises_fails_the_request_and_holds_nothing() -> None:
    def broken(scope: MutableMapping[str, Any]) -> Hashable | None:
        raise LookupError("no verified tenant")

    app = HeldApp()
    app.hold = False
    middleware = admission(app, initial_limit=2, partition=broken)
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(LookupError, match="no verified tenant"):
            await client.get("http://service/")
    assert app.entered == []
    health = middleware.health()
    assert (health.in_use, health.queued, health.partitions) == (0, 0, 0)


async def test_served_over_httpx_the_partition_reads_the_scope() -> None:
    app = HeldApp()
    app.hold = False

    def by_user(scope: MutableMapping[str, Any]) -> str | None:
        return dict(scope["headers"]).get(b"x-verified-user", b"").decode() or None

    middleware = AdmissionMiddleware(app, partition=by_user)
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(
            "http://service/", headers={"x-verified-user": "u-1"}
        )
    assert response.status_code == 200
    assert response.text == "done"


async def test_5xx_answers_and_exceptions_teach_the_limit_nothing() -> None:
    clock = FakeClock()
    app = HeldApp(clock)
    app.hold = False
    app.service_time = 0.5
    app.status = 503
    middleware = admission(app, clock, initial_limit=4)
    for _ in range(50):
        assert (await call(middleware)).status == 503
    app.status = 200
    app.error = RuntimeError("handler failed")
    for _ in range(50):
        with pytest.raises(RuntimeError):
            await call(middleware)
    health = middleware.health()
    assert (health.baseline_rtt, health.limit, health.in_use) == (0.0, 4, 0)
    # The same latency answered 200 is learned: the check above can fail.
    app.error = None
    for _ in range(20):
        assert (await call(middleware)).status == 200
    assert middleware.health().baseline_rtt == pytest.approx(0.5)


async def test_a_request_the_app_never_answered_teaches_nothing() -> None:
    clock = FakeClock()

    async def silent(scope: Message, receive: Receive, send: Send) -> None:
        clock.advance(0.5)

    middleware = admission(silent, clock, initial_limit=4)
    for _ in range(30):
        await call(middleware)
    assert middleware.health().baseline_rtt == 0.0


async def test_the_limit_falls_when_latency_rises_with_concurrency() -> None:
    clock = FakeClock()
    app = HeldApp(clock)
    middleware = admission(app, clock, initial_limit=16, max_limit=64)
    capacity = 16

    def queueing(inside: int) -> float:
        # A server with `capacity` workers: beyond them, requests queue.
        return 0.01 * max(1.0, inside / capacity)

    for _ in range(300):
        await _round(middleware, app, clock, 64, queueing)
    learned = middleware.health()
    assert learned.baseline_rtt == pytest.approx(0.01, rel=0.3)
    # At the workers, with the queue the controller allows (sqrt(limit)).
    assert 16 <= learned.limit <= 16 + 2 * math.sqrt(16)
    capacity = 2  # the handlers' dependency slows down: fewer fit at once
    for _ in range(300):
        await _round(middleware, app, clock, 64, queueing)
    fallen = middleware.health()
    assert fallen.limit <= 2 + 2 * math.sqrt(2)
    assert fallen.in_use == 0


async def _round(
    middleware: AdmissionMiddleware,
    app: HeldApp,
    clock: FakeClock,
    offered: int,
    latency: Callable[[int], float],
) -> None:
    """`offered` requests at once: those let in take `latency(inside)` seconds."""
    overloaded = middleware.health().overloaded
    answers: list[Answer] = []

    async def one() -> None:
        answers.append(await call(middleware))

    async with anyio.create_task_group() as group:
        for _ in range(offered):
            group.start_soon(one)
        await until(
            lambda: app.inside + middleware.health().overloaded - overloaded == offered
        )
        clock.advance(latency(app.inside))
        app.release()
    clock.advance(0.1)  # idle between rounds: a window spans several
    assert len(answers) == offered


async def test_lifespan_and_websocket_pass_straight_through() -> None:
    seen: list[str] = []

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])
        await send({"type": f"{scope['type']}.seen"})

    middleware = admission(app, initial_limit=1, partition=by_tenant)
    sent: list[Message] = []

    async def record(message: Message) -> None:
        sent.append(message)

    for kind in ("lifespan", "websocket"):
        await middleware({"type": kind}, empty_body(), record)
    assert seen == ["lifespan", "websocket"]
    assert [message["type"] for message in sent] == ["lifespan.seen", "websocket.seen"]
    assert middleware.health().in_use == 0


async def test_the_defaults() -> None:
    middleware = AdmissionMiddleware(HeldApp())
    health = middleware.health()
    assert (health.limit, health.queue_limit) == (20, 0)
    assert middleware.share() == 10


@pytest.mark.parametrize("share", [0, 0.0, -0.5, 1.01, 2, math.nan, math.inf])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match=r"^partition_share must be in \(0, 1\], got"):
        AdmissionMiddleware(HeldApp(), partition_share=share)


@pytest.mark.parametrize("share", ["0.5", True, None])
def test_a_share_that_is_no_number_is_refused(share: object) -> None:
    with pytest.raises(TypeError, match=r"^partition_share must be a number in"):
        AdmissionMiddleware(HeldApp(), partition_share=share)  # type: ignore[arg-type]


def test_a_limiter_of_another_kind_is_refused() -> None:
    with pytest.raises(
        TypeError,
        match=(
            r"^limiter must be an AdaptiveLimiterOptions, "
            r"got ConcurrencyLimiterOptions$"
        ),
    ):
        AdmissionMiddleware(HeldApp(), limiter=ConcurrencyLimiterOptions())  # type: ignore[arg-type]


def test_a_partition_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^partition must be a callable .* got str$"):
        AdmissionMiddleware(HeldApp(), partition="tenant")  # type: ignore[arg-type]


async def _async_partition(scope: MutableMapping[str, Any]) -> str:
    return "a"


class _AsyncCall:
    async def __call__(self, scope: MutableMapping[str, Any]) -> str:
        return "a"


@pytest.mark.parametrize(
    "partition",
    [_async_partition, _AsyncCall(), functools.partial(_async_partition)],
    ids=["function", "object", "partial"],
)
def test_an_async_partition_is_refused(partition: object) -> None:
    with pytest.raises(TypeError, match=r"^partition must be a plain function"):
        AdmissionMiddleware(HeldApp(), partition=partition)  # type: ignore[arg-type]
