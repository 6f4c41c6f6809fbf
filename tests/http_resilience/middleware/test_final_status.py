"""A dependency the client gave up on is an outage: its status error maps.

The retry (and hedging) mark the last answer of a call they gave up on with
``resilience_final``: they retried it as far as the policy goes, or refused
the retry (budget, deadline, an asked wait past it). `problem_for` maps the
`httpx.HTTPStatusError` of ``raise_for_status()`` on such an answer to 503,
502 or 504 with the dependency's ``Retry-After``; an unmarked one (a 404, a
POST never retried) is re-raised as a possible bug, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http import HTTPStatus
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    ResilienceContextMiddleware,
    ResilienceErrorMiddleware,
    ResiliencePipeline,
    deadline_scope,
)
from http_resilience._core.classify import FINAL_MARK
from http_resilience._middleware.asgi import problem_for
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    Reply,
    Script,
    async_transport,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DOWN = Reply(503, {"Retry-After": "7"})


async def fetch(
    transport: httpx.AsyncBaseTransport, method: str = "GET", **kwargs: Any
) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.request(method, URL, **kwargs)


def status_error(response: httpx.Response) -> httpx.HTTPStatusError:
    with pytest.raises(httpx.HTTPStatusError) as raised:
        response.raise_for_status()
    return raised.value


def marked(response: httpx.Response) -> bool:
    return response.extensions.get(FINAL_MARK) is True


# --- the mark: what the client gave up on, and only that ----------------------------


async def test_an_answer_retried_until_the_attempts_ran_out_is_marked() -> None:
    dead = script(DOWN)
    clock = FakeClock()
    response = await fetch(async_transport(dead, clock))
    assert (response.status_code, dead.hits, marked(response)) == (503, 4, True)
    assert clock.sleeps == [7.0, 7.0, 7.0]  # the asked wait, each time
    assert marked(status_error(response).response)


def test_a_blocking_clients_exhausted_answer_is_marked() -> None:
    dead = script(502)
    with httpx.Client(transport=sync_transport(dead, FakeClock())) as client:
        response = client.get(URL)
    assert (response.status_code, dead.hits, marked(response)) == (502, 4, True)
    assert problem_for(status_error(response)) == (HTTPStatus.BAD_GATEWAY, None)


async def test_a_retry_the_budget_refuses_leaves_its_answer_marked() -> None:
    dead = script(DOWN)
    transport = async_transport(
        dead, FakeClock(), retry_budget_ratio=0, retry_budget_min_per_second=0
    )
    response = await fetch(transport)
    assert (dead.hits, marked(response)) == (1, True)


async def test_a_retry_the_deadline_leaves_no_time_for_is_refused_and_marked() -> None:
    # The first backoff is 1 s (2 s base, no jitter): a 1 s deadline cannot
    # hold it, so the call ends at once on its first answer.
    dead = script(500)
    with deadline_scope(1.0):
        response = await fetch(async_transport(dead, FakeClock()))
    assert (dead.hits, marked(response)) == (1, True)


async def test_an_asked_wait_past_the_total_timeout_is_refused_and_marked() -> None:
    dead = script(Reply(503, {"Retry-After": "40"}))  # the total timeout is 30 s
    clock = FakeClock()
    response = await fetch(async_transport(dead, clock))
    assert (dead.hits, clock.sleeps, marked(response)) == (1, [], True)
    assert problem_for(status_error(response)) == (HTTPStatus.SERVICE_UNAVAILABLE, 40)


@pytest.mark.parametrize("status", [400, 404, 409, 422, 501])
async def test_a_status_that_is_never_retried_is_not_marked(status: int) -> None:
    answer = script(status)
    response = await fetch(async_transport(answer, FakeClock()))
    assert (answer.hits, marked(response)) == (1, False)
    assert problem_for(status_error(response)) is None


async def test_a_post_the_client_may_not_repeat_is_not_marked() -> None:
    # Sent once: no retry was refused, the method was never retryable, and a
    # layer outside that knows the command is safe to repeat may retry it.
    answer = script(DOWN)
    response = await fetch(async_transport(answer, FakeClock()), "POST", json={})
    assert (answer.hits, marked(response)) == (1, False)
    # With an Idempotency-Key it is retried, and what it gives up on marked.
    keyed = script(DOWN)
    response = await fetch(
        async_transport(keyed, FakeClock()),
        "POST",
        json={},
        headers={"Idempotency-Key": "order-7"},
    )
    assert (keyed.hits, marked(response)) == (4, True)


async def test_an_answer_that_recovered_is_not_marked() -> None:
    response = await fetch(async_transport(script(503, 200), FakeClock()))
    assert (response.status_code, marked(response)) == (200, False)


def hedged(answers: Script) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(answers),
        pipeline=ResiliencePipeline().add_hedging(max_hedged_attempts=2),
        clock=FakeClock(),
    )


async def test_hedging_whose_every_copy_failed_marks_the_last_answer() -> None:
    dead = script(503)
    response = await fetch(hedged(dead))
    assert (response.status_code, dead.hits, marked(response)) == (503, 3, True)


async def test_hedging_whose_every_copy_failed_in_transport_marks_the_error() -> None:
    with pytest.raises(httpx.ConnectError) as raised:
        await fetch(hedged(script(httpx.ConnectError("refused"))))
    assert getattr(raised.value, FINAL_MARK) is True


async def test_hedging_that_got_a_good_answer_marks_nothing() -> None:
    response = await fetch(hedged(script(503, 200)))
    assert (response.status_code, marked(response)) == (200, False)


async def test_a_breaker_that_opens_between_retries_raises_its_own_mapped_error() -> (
    None
):
    # Two failures in a row open this breaker: the retry's next attempt is
    # refused in this process, and the refusal (not the answer) escapes.
    dead = script(503)
    transport = async_transport(
        dead, FakeClock(), minimum_throughput=2, failure_ratio=0.5
    )
    with pytest.raises(BrokenCircuitError) as raised:
        await fetch(transport)
    assert dead.hits == 2
    # The break (5 s) began before the wait for the refused retry: less is left.
    status, wait = problem_for(raised.value) or (None, None)
    assert status == HTTPStatus.SERVICE_UNAVAILABLE
    assert wait is not None
    assert 0 < wait < 5


# --- the mapping ---------------------------------------------------------------------


def gave_up_on(
    status: int, headers: dict[str, str] | None = None, *, final: bool = True
) -> httpx.HTTPStatusError:
    response = httpx.Response(
        status, headers=headers, request=httpx.Request("GET", URL)
    )
    if final:
        response.extensions[FINAL_MARK] = True
    return status_error(response)


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (503, HTTPStatus.SERVICE_UNAVAILABLE),
        (429, HTTPStatus.SERVICE_UNAVAILABLE),
        (504, HTTPStatus.GATEWAY_TIMEOUT),
        (500, HTTPStatus.BAD_GATEWAY),
        (502, HTTPStatus.BAD_GATEWAY),
        (408, HTTPStatus.BAD_GATEWAY),
        (599, HTTPStatus.BAD_GATEWAY),
    ],
)
def test_a_status_the_client_gave_up_on_maps_by_who_failed(
    status: int, answer: HTTPStatus
) -> None:
    assert problem_for(gave_up_on(status)) == (answer, None)


@pytest.mark.parametrize(
    ("value", "wait"),
    [
        ("7", 7.0),
        ("0", 0.0),
        ("999999999", 86_400.0),  # clamped to a day, as every other wait
        ("-1", None),
        ("7.5", None),
        ("soon", None),
    ],
)
@pytest.mark.parametrize("status", [503, 429])
def test_an_overloads_retry_after_is_passed_on_when_valid(
    status: int, value: str, wait: float | None
) -> None:
    error = gave_up_on(status, {"Retry-After": value})
    assert problem_for(error) == (HTTPStatus.SERVICE_UNAVAILABLE, wait)


def test_a_retry_after_date_is_read_against_the_answers_own_date() -> None:
    sent = datetime(2020, 1, 1, tzinfo=UTC)  # long past: our clock is not used
    headers = {
        "Date": format_datetime(sent, usegmt=True),
        "Retry-After": format_datetime(sent + timedelta(seconds=90), usegmt=True),
    }
    assert problem_for(gave_up_on(503, headers)) == (
        HTTPStatus.SERVICE_UNAVAILABLE,
        90.0,
    )


def test_a_retry_after_on_another_status_is_not_passed_on() -> None:
    # The retry itself reads Retry-After on 429 and 503 only.
    error = gave_up_on(500, {"Retry-After": "7"})
    assert problem_for(error) == (HTTPStatus.BAD_GATEWAY, None)


@pytest.mark.parametrize("status", [503, 500, 404])
def test_an_unmarked_status_error_does_not_map(status: int) -> None:
    assert problem_for(gave_up_on(status, final=False)) is None


def test_a_mark_other_than_true_is_no_mark() -> None:
    error = gave_up_on(503, final=False)
    error.response.extensions[FINAL_MARK] = "yes"
    assert problem_for(error) is None


def test_a_group_of_marked_errors_takes_the_most_conservative_answer() -> None:
    group = ExceptionGroup(
        "handlers",
        [gave_up_on(502), gave_up_on(503, {"Retry-After": "7"}), gave_up_on(504)],
    )
    assert problem_for(group) == (HTTPStatus.SERVICE_UNAVAILABLE, 7.0)
    beside_a_breaker = ExceptionGroup(
        "handlers", [gave_up_on(500), BrokenCircuitError("open", retry_after=3.0)]
    )
    assert problem_for(beside_a_breaker) == (HTTPStatus.SERVICE_UNAVAILABLE, 3.0)


def test_a_group_holding_an_unmarked_status_error_does_not_map() -> None:
    group = ExceptionGroup("handlers", [gave_up_on(503), gave_up_on(404, final=False)])
    assert problem_for(group) is None


# --- through the middlewares, in process ---------------------------------------------


def service(dependency: httpx.AsyncBaseTransport, path: str = "/") -> Any:
    """A handler that calls its dependency and raises on a failed answer."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        async with httpx.AsyncClient(transport=dependency) as client:
            answer = await client.get(f"http://payments.local{path}")
        answer.raise_for_status()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"paid"})

    return app


async def ask(app: Any) -> httpx.Response:
    # raise_app_exceptions (the default): an error the middleware raised on
    # fails the test here.
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://orders.local"
    ) as client:
        return await client.get("/orders/7")


def context_around_error(app: Any) -> Any:
    return ResilienceContextMiddleware(ResilienceErrorMiddleware(app))


@pytest.mark.parametrize(
    "wrap",
    [ResilienceErrorMiddleware, ResilienceContextMiddleware, context_around_error],
    ids=["error", "context", "context-around-error"],
)
async def test_a_middleware_answers_a_dependency_that_gave_up_without_raising(
    wrap: Callable[[Any], Any],
) -> None:
    answer = await ask(wrap(service(async_transport(script(DOWN), FakeClock()))))
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"] == "7"
    assert answer.json()["status"] == 503
    assert "payments" not in answer.text


async def test_the_context_middleware_says_the_retries_ran_out() -> None:
    answer = await ask(
        ResilienceContextMiddleware(service(async_transport(script(504), FakeClock())))
    )
    assert (answer.status_code, answer.headers["x-retry-exhausted"]) == (504, "1")
    assert "retry-after" not in answer.headers


@pytest.mark.parametrize(
    "wrap",
    [ResilienceErrorMiddleware, ResilienceContextMiddleware],
    ids=["error", "context"],
)
async def test_a_dependencys_404_is_still_raised(wrap: Callable[[Any], Any]) -> None:
    app = wrap(service(async_transport(script(404), FakeClock())))
    with pytest.raises(httpx.HTTPStatusError, match="404"):
        await ask(app)
