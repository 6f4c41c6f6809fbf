"""Between services: `ResilienceContextMiddleware` and nested retries.

A service's handler, behind the middleware, sees its caller's deadline (less
a margin, clamped), its correlation id, and whether the caller is retrying;
its own resilient calls then make one attempt each (``"suppress"``) or retry
and report it (``"report"``). Retried attempts carry ``X-Retry-Attempt``.
The ASGI apps run in process through `httpx.ASGITransport`; the outbound
calls go to a scripted transport on a `FakeClock`.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import timedelta
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    HttpClientFactory,
    HttpEvent,
    NestedRetryEvent,
    ResilienceContextMiddleware,
    current_correlation_id,
    remaining_time,
)
from http_resilience._core.nested import (
    caller_attempt,
    caller_attempt_scope,
    downstream_scope,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    Reply,
    async_transport,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Seen:
    """An ASGI app answering 200 that records the context its handler ran in."""

    def __init__(self) -> None:
        self.remaining: float | None = None
        self.attempt: int | None = None
        self.correlation: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.remaining = remaining_time()
        self.attempt = caller_attempt()
        self.correlation = current_correlation_id()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Any, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://service.local"
    ) as client:
        return await client.get("/work", headers=headers)


async def test_the_handler_sees_the_callers_deadline_attempt_and_id() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, safety_margin=0.1)
    headers = {
        "X-Request-Timeout-Ms": "1500",
        "X-Retry-Attempt": "2",
        "X-Correlation-ID": "order-42",
    }
    assert (await call(app, headers)).status_code == 200
    assert seen.remaining is not None
    assert 1.3 < seen.remaining <= 1.4  # 1.5 s less the 0.1 s margin
    assert (seen.attempt, seen.correlation) == (2, "order-42")
    # Outside the request, none of it is left behind.
    assert (remaining_time(), caller_attempt(), current_correlation_id()) == (
        None,
        None,
        None,
    )


async def test_a_first_attempt_is_no_retry_and_a_long_deadline_is_clamped() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, max_deadline=5)
    await call(app, {"X-Request-Timeout-Ms": "86400000", "X-Retry-Attempt": "1"})
    assert seen.remaining is not None
    assert seen.remaining <= 5
    assert seen.attempt is None


@pytest.mark.parametrize(
    "value",
    ["9" * 12, "9" * 13, "1" + "0" * 30, "9" * 100_000, " " + "9" * 40 + " "],
)
async def test_a_deadline_of_any_number_of_digits_is_clamped_never_ignored(
    value: str,
) -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, max_deadline=5, safety_margin=0)
    assert (await call(app, {"X-Request-Timeout-Ms": value})).status_code == 200
    assert seen.remaining is not None
    assert 4 < seen.remaining <= 5
    assert app.ignored == {}


async def test_leading_zeros_are_no_long_deadline() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, max_deadline=5, safety_margin=0)
    await call(app, {"X-Request-Timeout-Ms": "0" * 30 + "1500"})
    assert seen.remaining is not None
    assert 1 < seen.remaining <= 1.5
    await call(app, {"X-Request-Timeout-Ms": "0" * 30})
    assert seen.remaining == 0.0
    assert app.ignored == {}


@pytest.mark.parametrize(
    ("header", "value", "counted"),
    [
        ("X-Request-Timeout-Ms", "soon", "deadline"),
        ("X-Request-Timeout-Ms", "-5", "deadline"),
        ("X-Request-Timeout-Ms", "1.5", "deadline"),
        ("X-Request-Timeout-Ms", "9 9", "deadline"),
        ("X-Retry-Attempt", "0", "attempt"),
        ("X-Retry-Attempt", "two", "attempt"),
        ("X-Retry-Attempt", "100000", "attempt"),
        ("X-Correlation-ID", "x" * 201, "correlation"),
        ("X-Correlation-ID", "a,b", "correlation"),
        ("X-Correlation-ID", "a, b", "correlation"),
    ],
)
async def test_a_malformed_value_is_ignored_and_counted_never_raised(
    header: str, value: str, counted: str
) -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen)
    assert (await call(app, {header: value})).status_code == 200
    assert (seen.remaining, seen.attempt) == (None, None)
    assert is_fresh(seen.correlation)
    assert app.ignored == {counted: 1}


def is_fresh(correlation: str | None) -> bool:
    """True for an id this package made (a version 8 UUID), not one a caller sent."""
    return correlation is not None and uuid.UUID(correlation).version == 8


async def call_raw(app: Any, headers: list[tuple[bytes, bytes]]) -> None:
    """Drive `app` with raw header lines, which httpx would merge or refuse."""

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        return None

    scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": headers}
    await app(scope, receive, send)


# --- the correlation id: one reading rule -----------------------------------------


async def test_an_id_of_200_characters_is_taken_and_outer_blanks_are_not_part() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen)
    await call(app, {"X-Correlation-ID": "a" * 200})
    await call_raw(app, [(b"x-correlation-id", b" \torder-42\t ")])
    assert seen.correlation == "order-42"
    assert app.ignored == {}


async def test_an_id_sent_twice_is_refused_and_a_fresh_one_made() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen)
    await call_raw(
        app, [(b"X-Correlation-ID", b"first"), (b"x-correlation-id", b"second")]
    )
    assert is_fresh(seen.correlation)
    assert app.ignored == {"correlation": 1}
    # The same when both lines carry the same value: there is no one id sent.
    await call_raw(
        app, [(b"x-correlation-id", b"same"), (b"x-correlation-id", b"same")]
    )
    assert is_fresh(seen.correlation)
    assert app.ignored == {"correlation": 2}


async def test_without_an_id_each_request_gets_one_every_call_of_it_carries() -> None:
    sent: list[str] = []

    def dependency(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["x-correlation-id"])
        return httpx.Response(200)

    factory = HttpClientFactory()
    factory.add("dep", transport=httpx.MockTransport(dependency))
    client = factory.async_client("dep")

    async def service(scope: Scope, receive: Receive, send: Send) -> None:
        await client.get("http://dep.local/a")
        await client.get("http://dep.local/b")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = ResilienceContextMiddleware(service)
    await call(app, {})
    await call(app, {})
    await factory.aclose()
    assert sent[0] == sent[1] != sent[2] == sent[3]
    assert all(is_fresh(made) for made in sent)


async def test_with_no_correlation_header_read_no_id_is_set() -> None:
    seen = Seen()
    await call(
        ResilienceContextMiddleware(seen, correlation_header=None),
        {"X-Correlation-ID": "order-42"},
    )
    assert seen.correlation is None


# --- trust: whose headers are read ------------------------------------------------

FROM_A_CALLER = {
    "X-Request-Timeout-Ms": "1500",
    "X-Retry-Attempt": "2",
    "X-Correlation-ID": "order-42",
}


async def test_an_untrusted_callers_deadline_attempt_and_id_are_ignored() -> None:
    seen, scopes = Seen(), list[Scope]()

    def trusted(scope: Scope) -> bool:
        scopes.append(scope)
        return False

    app = ResilienceContextMiddleware(seen, trusted=trusted)
    assert (await call(app, FROM_A_CALLER)).status_code == 200
    assert (seen.remaining, seen.attempt) == (None, None)
    assert is_fresh(seen.correlation)
    # Not read at all: nothing is counted as malformed.
    assert app.ignored == {}
    assert [scope["path"] for scope in scopes] == ["/work"]


async def test_an_untrusted_caller_gets_the_default_deadline() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(
        seen, trusted=lambda scope: False, default_deadline=timedelta(seconds=3)
    )
    await call(app, FROM_A_CALLER)
    assert seen.remaining is not None
    assert 2.9 < seen.remaining <= 3  # the default, not the caller's 1.5 s
    assert (seen.attempt, is_fresh(seen.correlation)) == (None, True)


async def test_a_trusted_callers_headers_are_read() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(
        seen, trusted=lambda scope: scope["path"] == "/work", safety_margin=0
    )
    await call(app, FROM_A_CALLER)
    assert seen.remaining is not None
    assert 1.4 < seen.remaining <= 1.5
    assert (seen.attempt, seen.correlation) == (2, "order-42")


async def test_the_default_deadline_is_also_the_longest_a_caller_may_give() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, default_deadline=2, safety_margin=0)
    # None sent: the default.
    await call(app, {})
    assert seen.remaining is not None
    assert 1.9 < seen.remaining <= 2
    # A shorter one is kept: a caller may shorten the time a request gets.
    await call(app, {"X-Request-Timeout-Ms": "500"})
    assert 0.4 < seen.remaining <= 0.5
    # A longer one is cut to the default, never lengthened past it.
    await call(app, {"X-Request-Timeout-Ms": "60000"})
    assert 1.9 < seen.remaining <= 2
    assert app.ignored == {}


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (timedelta(milliseconds=250), timedelta(milliseconds=250)),
        (5, timedelta(seconds=5)),
        (0.5, timedelta(milliseconds=500)),
        ("200ms", timedelta(milliseconds=200)),
        ("PT1M", timedelta(minutes=1)),
        (300, timedelta(seconds=300)),
    ],
)
def test_a_default_deadline_is_a_duration(given: Any, read: timedelta) -> None:
    assert (
        ResilienceContextMiddleware(Seen(), default_deadline=given).default_deadline
        == read
    )


async def test_a_trust_verdict_that_is_no_bool_fails_the_request() -> None:
    truthy = ResilienceContextMiddleware(Seen(), trusted=lambda scope: "yes")  # type: ignore[arg-type,return-value]
    with pytest.raises(
        TypeError, match=r"^trusted must return True or False, got str$"
    ):
        await call(truthy, FROM_A_CALLER)

    async def check(scope: Scope) -> bool:
        return True  # pragma: no cover - never awaited

    # A plain lambda around an async function hands back a coroutine: closed,
    # so no "never awaited" warning, and refused.
    hidden = ResilienceContextMiddleware(Seen(), trusted=lambda scope: check(scope))  # type: ignore[arg-type,return-value]
    with pytest.raises(
        TypeError, match=r"^trusted must return True or False, got coroutine$"
    ):
        await call(hidden, FROM_A_CALLER)


def test_the_trust_defaults() -> None:
    app = ResilienceContextMiddleware(Seen())
    assert (app.trusted, app.default_deadline) == (None, None)


async def async_check(scope: Scope) -> bool:
    return True  # pragma: no cover - refused before any call


class AsyncCheck:
    async def __call__(self, scope: Scope) -> bool:
        return True  # pragma: no cover - refused before any call


NOT_CALLABLE = (
    r"^trusted must be a callable that takes the ASGI scope and returns True or "
    r"False, or None, got "
)
ASYNC = (
    r"^trusted must be a plain function, not async def: it decides from the ASGI "
    r"scope alone$"
)


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"trusted": True}, TypeError, NOT_CALLABLE + "bool$"),
        ({"trusted": "127.0.0.1"}, TypeError, NOT_CALLABLE + "str$"),
        ({"trusted": async_check}, TypeError, ASYNC),
        ({"trusted": AsyncCheck()}, TypeError, ASYNC),
        ({"trusted": functools.partial(async_check)}, TypeError, ASYNC),
        (
            {"default_deadline": True},
            TypeError,
            r"^default_deadline must be a timedelta, seconds or a string such as "
            r"'5s', or None, got bool$",
        ),
        (
            {"default_deadline": [5]},
            TypeError,
            r"^default_deadline must be a timedelta, seconds or a string such as "
            r"'5s', or None, got list$",
        ),
        (
            {"default_deadline": 0},
            ValueError,
            r"^default_deadline must be positive, got 0 s$",
        ),
        (
            {"default_deadline": "0ms"},
            ValueError,
            r"^default_deadline must be positive, got 0 s$",
        ),
        (
            {"default_deadline": -1},
            ValueError,
            r"^default_deadline: a duration must be finite and not negative, got -1$",
        ),
        (
            {"default_deadline": float("nan")},
            ValueError,
            r"^default_deadline: a duration must be finite and not negative, got nan$",
        ),
        (
            {"default_deadline": float("inf")},
            ValueError,
            r"^default_deadline: a duration must be finite and not negative, got inf$",
        ),
        (
            {"default_deadline": "soon"},
            ValueError,
            r"^default_deadline: 'soon' is not a duration: give seconds, ",
        ),
        (
            {"default_deadline": timedelta(days=10**6)},
            ValueError,
            r"^default_deadline may be at most 24 days \(MAX_DURATION\), ",
        ),
        (
            {"default_deadline": timedelta(seconds=301)},
            ValueError,
            r"^default_deadline \(301 s\) may not be longer than max_deadline "
            r"\(300 s\)$",
        ),
        (
            {"default_deadline": 10, "max_deadline": 2.5},
            ValueError,
            r"^default_deadline \(10 s\) may not be longer than max_deadline "
            r"\(2.5 s\)$",
        ),
    ],
)
def test_a_bad_trust_setting_is_refused_when_the_middleware_is_built(
    values: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ResilienceContextMiddleware(Seen(), **values)


async def test_headers_may_be_renamed_or_not_read() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(
        seen, deadline_header=None, attempt_header="Grpc-Retry-Attempt"
    )
    await call(app, {"X-Request-Timeout-Ms": "100", "Grpc-Retry-Attempt": "3"})
    assert (seen.remaining, seen.attempt) == (None, 3)
    with pytest.raises(ValueError, match="safety_margin must be"):
        ResilienceContextMiddleware(seen, safety_margin=-1)


async def test_other_scopes_pass_through_untouched() -> None:
    passed: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        passed.append(scope["type"])

    async def nothing() -> MutableMapping[str, Any]:
        return {}

    async def ignore(message: MutableMapping[str, Any]) -> None:
        return None

    await ResilienceContextMiddleware(app)({"type": "lifespan"}, nothing, ignore)
    assert passed == ["lifespan"]


# --- nested retries ------------------------------------------------------------------


async def send_one(transport: httpx.AsyncBaseTransport) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", URL))


async def test_retried_attempts_carry_their_number() -> None:
    server = script(503, 503, 200)
    await send_one(async_transport(server, FakeClock()))
    numbers = [request.headers.get("x-retry-attempt") for request in server.requests]
    assert numbers == [None, "2", "3"]
    quiet = script(503, 200)
    await send_one(async_transport(quiet, FakeClock(), detect_nested_retries=False))
    assert [r.headers.get("x-retry-attempt") for r in quiet.requests] == [None, None]


async def test_while_the_caller_retries_a_call_makes_one_attempt() -> None:
    events, server = EventRecorder[HttpEvent](), script(503)
    transport = async_transport(server, FakeClock(), events=events)
    with caller_attempt_scope(2):
        assert (await send_one(transport)).status_code == 503
    assert server.hits == 1
    assert events.of(NestedRetryEvent) == [
        NestedRetryEvent("orders", "GET", "http://api.example:80", 2, True)
    ]


async def test_report_mode_retries_and_reports() -> None:
    events, server = EventRecorder[HttpEvent](), script(503, 503, 200)
    transport = async_transport(
        server, FakeClock(), events=events, nested_retries="report"
    )
    with caller_attempt_scope(3):
        assert (await send_one(transport)).status_code == 200
    assert server.hits == 3
    assert [event.suppressed for event in events.of(NestedRetryEvent)] == [
        False,
        False,
    ]


async def test_a_service_behind_the_middleware_does_not_retry_under_its_caller() -> (
    None
):
    # Service B, behind the middleware, calls a dead service C. Its caller is
    # on its second attempt: B's call to C is made once, not four times.
    dead_c = script(503)
    client_to_c = AsyncResilientTransport(
        httpx.MockTransport(dead_c), clock=FakeClock(), name="c"
    )

    async def service_b(scope: Scope, receive: Receive, send: Send) -> None:
        answer = await send_one(client_to_c)
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": []}
        )
        await send({"type": "http.response.body", "body": b""})

    app = ResilienceContextMiddleware(service_b)
    assert (await call(app, {"X-Retry-Attempt": "2"})).status_code == 503
    assert dead_c.hits == 1
    assert (await call(app, {})).status_code == 503  # a first attempt: B retries
    assert dead_c.hits == 1 + 4


# --- a dependency's retries ran out: the answer says so ---------------------------

EXHAUSTED = "x-retry-exhausted"


def service_calling(
    dependency: httpx.AsyncBaseTransport, *, escape: bool = False
) -> Any:
    """A service that calls `dependency` once and answers with its status.

    With `escape`, a failed dependency's answer becomes an exception that
    escapes the handler, as ``raise_for_status()`` left unhandled does.
    """

    async def service(scope: Scope, receive: Receive, send: Send) -> None:
        answer = await send_one(dependency)
        if escape and answer.status_code >= 400:
            raise RuntimeError(f"the dependency answered {answer.status_code}")
        status = answer.status_code
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    return service


async def test_a_failed_answer_after_a_dependencys_retries_ran_out_says_so() -> None:
    dead_c = script(503)
    app = ResilienceContextMiddleware(
        service_calling(async_transport(dead_c, FakeClock()))
    )
    answer = await call(app, {})
    assert (answer.status_code, answer.headers.get(EXHAUSTED)) == (503, "1")
    assert dead_c.hits == 4
    # While the caller retries, the one attempt made is final as well.
    answer = await call(app, {"X-Retry-Attempt": "2"})
    assert (answer.status_code, answer.headers.get(EXHAUSTED)) == (503, "1")
    assert dead_c.hits == 4 + 1


async def test_no_mark_when_no_call_gave_up_or_the_answer_is_no_failure() -> None:
    recovered = script(503, 200)
    app = ResilienceContextMiddleware(
        service_calling(async_transport(recovered, FakeClock()))
    )
    answer = await call(app, {})
    assert (answer.status_code, EXHAUSTED in answer.headers) == (200, False)

    # A service that falls back after a call gave up answers 200, unmarked.
    async def falls_back(scope: Scope, receive: Receive, send: Send) -> None:
        await send_one(async_transport(script(503), FakeClock()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"cached"})

    answer = await call(ResilienceContextMiddleware(falls_back), {})
    assert (answer.status_code, EXHAUSTED in answer.headers) == (200, False)


async def answer_of(app: Any) -> httpx.Response:
    """What a server would answer for `app`: its own 500 when an error escapes."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://service.local",
    ) as client:
        return await client.get("/work")


async def test_an_escaping_error_after_retries_ran_out_is_a_marked_503() -> None:
    app = ResilienceContextMiddleware(
        service_calling(async_transport(script(503), FakeClock()), escape=True)
    )
    answer = await answer_of(app)
    assert (answer.status_code, answer.headers.get(EXHAUSTED)) == (503, "1")
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["status"] == 503
    # The error is raised on, for the server to log.
    with pytest.raises(RuntimeError, match="answered 503"):
        await call(app, {})


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (httpx.ConnectError("refused"), 502),
        # A read timeout before the pipeline's deadline is the transport's own,
        # raised as httpx raised it: the dependency did not answer in time.
        (httpx.ReadTimeout("slow"), 504),
    ],
)
async def test_an_escaping_outage_is_answered_as_the_error_middleware_would(
    failure: Exception, status: int
) -> None:
    dead_c = script(failure)
    app = ResilienceContextMiddleware(
        service_calling(async_transport(dead_c, FakeClock()))
    )
    # An outage, not a bug: answered, and not raised on.
    answer = await call(app, {})
    assert (answer.status_code, answer.headers.get(EXHAUSTED)) == (status, "1")
    assert answer.json()["status"] == status
    assert dead_c.hits == 4


async def test_an_escaping_error_with_no_call_given_up_is_left_alone() -> None:
    app = ResilienceContextMiddleware(
        service_calling(async_transport(script(404), FakeClock()), escape=True)
    )
    answer = await answer_of(app)
    assert (answer.status_code, EXHAUSTED in answer.headers) == (500, False)


async def test_the_mark_may_be_renamed_or_not_written() -> None:
    service = service_calling(async_transport(script(503), FakeClock()))
    renamed = ResilienceContextMiddleware(service, exhausted_header="X-Gave-Up")
    answer = await call(renamed, {})
    assert (answer.headers.get("x-gave-up"), EXHAUSTED in answer.headers) == (
        "1",
        False,
    )
    silent = ResilienceContextMiddleware(service, exhausted_header=None)
    assert EXHAUSTED not in (await call(silent, {})).headers


async def test_a_marked_failure_is_not_retried_by_the_caller() -> None:
    events, b = (
        EventRecorder[HttpEvent](),
        script(Reply(503, {"X-Retry-Exhausted": "1"})),
    )
    answer = await send_one(async_transport(b, FakeClock(), events=events))
    assert (answer.status_code, b.hits) == (503, 1)
    assert answer.extensions["resilience_final"] is True
    # Without nested retry detection the mark is not read: retried as before.
    ignored = script(Reply(503, {"X-Retry-Exhausted": "1"}))
    await send_one(async_transport(ignored, FakeClock(), detect_nested_retries=False))
    assert ignored.hits == 4


def test_a_marked_failure_is_not_retried_by_a_blocking_caller() -> None:
    b = script(Reply(502, {"X-Retry-Exhausted": "1"}), 200)
    answer = sync_transport(b, FakeClock()).handle_request(httpx.Request("GET", URL))
    assert (answer.status_code, b.hits) == (502, 1)
    assert answer.extensions["resilience_final"] is True


def test_a_call_in_a_worker_thread_notes_its_request() -> None:
    # A sync handler run in a thread with the request's context copied (as
    # Starlette runs one) notes what it gave up on in the same record.
    with downstream_scope() as record:
        context = contextvars.copy_context()
        transport = sync_transport(script(503), FakeClock())
        worker = threading.Thread(
            target=context.run,
            args=(transport.handle_request, httpx.Request("GET", URL)),
        )
        worker.start()
        worker.join(timeout=10)
    assert record.exhausted is True


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"exhausted_header": b"X-Retry-Exhausted"}, TypeError),
        ({"exhausted_header": "X:Exhausted"}, ValueError),
        ({"deadline_header": 3}, TypeError),
        ({"attempt_header": "X Retry"}, ValueError),
        ({"correlation_header": "X-Id\r\n"}, ValueError),
        ({"max_deadline": float("inf")}, ValueError),
    ],
)
def test_a_bad_setting_is_refused_when_the_middleware_is_built(
    values: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        ResilienceContextMiddleware(Seen(), **values)
