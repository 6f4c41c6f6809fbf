"""Published quota in the standard pipeline, on a `FakeClock`.

A host whose answer says its quota is within the reserve is refused in this
process until the reset: `RateLimitedError` with reason ``"quota"``, a
`RejectionEvent`, nothing sent; a retry around it waits for the reset, never
past its deadline. The breaker never sees a refusal, and the retry budget is
not charged for one.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from http_resilience import (
    BreakerEvent,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    RetryEvent,
)
from http_resilience._core.call import Call
from http_resilience._pipelines.standard import standard_steps
from http_resilience._strategies.quota.options import QuotaOptions
from http_resilience._strategies.quota.strategy import SyncQuota
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    Reply,
    async_transport,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio

ONCE: dict[str, Any] = {"max_retry_attempts": 0}


def published(remaining: int, quota: int | None = 100, reset: int = 30) -> Reply:
    headers = {"RateLimit": f'"burst";r={remaining};t={reset}'}
    if quota is not None:
        headers["RateLimit-Policy"] = f'"burst";q={quota};w=60'
    return Reply(200, headers)


def get(transport: httpx.BaseTransport, url: str = URL) -> httpx.Response:
    return transport.handle_request(httpx.Request("GET", url))


def test_a_host_within_its_reserve_is_refused_until_the_reset() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(published(remaining=10), 200)
    transport = sync_transport(server, clock, events=events, **ONCE)
    assert get(transport).status_code == 200
    with pytest.raises(RateLimitedError) as refused:
        get(transport)
    assert refused.value.reason == "quota"
    assert refused.value.retry_after == 30.0
    assert "published quota is spent" in str(refused.value)
    assert server.hits == 1  # the refusal sent nothing
    assert [e.reason for e in events.of(RejectionEvent)] == ["quota"]
    clock.advance(29.5)
    with pytest.raises(RateLimitedError) as again:
        get(transport)
    assert again.value.retry_after == pytest.approx(0.5)
    clock.advance(0.5)
    assert get(transport).status_code == 200  # the window reset
    assert server.hits == 2


def test_allowance_above_the_reserve_or_no_quota_at_all_is_left_alone() -> None:
    clock = FakeClock()
    server = script(published(remaining=11), Reply(200, {"X-Other": "1"}), 200)
    transport = sync_transport(server, clock, **ONCE)
    for _ in range(3):
        assert get(transport).status_code == 200
    assert server.hits == 3


def test_a_remaining_count_without_a_quota_is_refused_only_at_zero() -> None:
    clock = FakeClock()
    server = script(published(remaining=1, quota=None), published(0, quota=None), 200)
    transport = sync_transport(server, clock, **ONCE)
    get(transport)
    get(transport)  # one left: not refused
    with pytest.raises(RateLimitedError):
        get(transport)
    assert server.hits == 2


def test_a_retry_waits_for_the_reset_as_for_retry_after() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    # The first answer fails and says the quota is spent for 4 s.
    spent = Reply(503, {"RateLimit": '"b";r=0;t=4', "RateLimit-Policy": '"b";q=10'})
    server = script(spent, 200)
    transport = sync_transport(server, clock, events=events)
    response = get(transport)
    assert response.status_code == 200
    assert server.hits == 2
    # The backoff (1 s) came first; then attempt 2 was refused and waited for
    # the 3 s left of the reset, then went.
    assert clock.sleeps == [1.0, 3.0]
    retries = events.of(RetryEvent)
    assert [event.reason for event in retries] == ["503", "quota"]
    assert [e.reason for e in events.of(RejectionEvent)] == ["quota"]


def test_a_reset_past_the_deadline_ends_the_call_at_once() -> None:
    clock = FakeClock()
    spent = Reply(503, {"RateLimit": '"b";r=0;t=600', "RateLimit-Policy": '"b";q=10'})
    server = script(spent, 200)
    transport = sync_transport(server, clock)
    with pytest.raises(RateLimitedError) as refused:
        get(transport)
    assert refused.value.retry_after == pytest.approx(599.0)
    assert server.hits == 1
    assert clock.sleeps == [1.0]  # the backoff; never the 600 s


def test_retry_after_wins_over_the_quotas_own_reset() -> None:
    clock = FakeClock()
    answer = Reply(
        429,
        {
            "Retry-After": "7",
            "RateLimit": '"b";r=0;t=30',
            "RateLimit-Policy": '"b";q=5',
        },
    )
    server = script(answer, 200)
    transport = sync_transport(server, clock, **ONCE)
    assert get(transport).status_code == 429
    with pytest.raises(RateLimitedError) as refused:
        get(transport)
    assert refused.value.retry_after == 7.0


def test_the_legacy_triple_under_names_of_your_own() -> None:
    clock = FakeClock()
    names = ("X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset")
    answer = Reply(200, dict(zip(names, ("50", "2", "12"), strict=True)))
    server = script(answer, 200)
    transport = sync_transport(server, clock, **ONCE, quota_legacy_headers=names)
    get(transport)
    with pytest.raises(RateLimitedError) as refused:
        get(transport)
    assert refused.value.retry_after == 12.0
    # The default names do not see it.
    other = script(answer, 200)
    transport = sync_transport(other, FakeClock(), **ONCE)
    get(transport)
    assert get(transport).status_code == 200


def test_the_standard_fields_win_over_the_legacy_triple() -> None:
    clock = FakeClock()
    answer = Reply(
        200,
        {
            "RateLimit": '"b";r=80;t=5',
            "RateLimit-Policy": '"b";q=100',
            "X-RateLimit-Limit": "100",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": "5",
        },
    )
    server = script(answer, 200)
    transport = sync_transport(server, clock, **ONCE)
    get(transport)
    assert get(transport).status_code == 200


def test_each_host_has_its_own_quota() -> None:
    clock = FakeClock()
    server = script(published(remaining=0), 200)
    transport = sync_transport(server, clock, **ONCE)
    get(transport, "http://a.example/x")
    with pytest.raises(RateLimitedError):
        get(transport, "http://a.example/y")
    assert get(transport, "http://b.example/x").status_code == 200


def test_a_later_answer_with_allowance_left_lifts_the_refusal() -> None:
    clock = FakeClock()
    server = script(published(remaining=0), published(remaining=50))
    transport = sync_transport(server, clock, **ONCE)
    get(transport)
    quota = transport_quota(transport)
    assert len(quota.book) == 1
    # An answer of an attempt that was already in flight arrives.
    later = httpx.Response(200, headers=published(remaining=50).headers)
    quota.read(Call("orders", "GET", "http://api.example:80"), later)
    assert len(quota.book) == 0
    assert get(transport).status_code == 200


def transport_quota(transport: Any) -> Any:
    built = transport._built  # pyright: ignore[reportPrivateUsage]
    found = built.find(SyncQuota)
    assert found is not None
    return found.strategy


def test_a_refusal_is_no_evidence_against_the_host() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(published(remaining=0, reset=100), 200)
    transport = sync_transport(
        server,
        clock,
        events=events,
        **ONCE,
        minimum_throughput=2,
        failure_ratio=0.1,
    )
    get(transport)
    for _ in range(10):
        with pytest.raises(RateLimitedError):
            get(transport)
    assert events.of(BreakerEvent) == []


def test_a_quota_wait_is_charged_to_the_budget_and_a_refusal_given_back() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    # Spent for 2 s, and still spent after (reset again).
    spent = Reply(503, {"RateLimit": '"b";r=0;t=2', "RateLimit-Policy": '"b";q=10'})
    server = script(spent)
    transport = sync_transport(
        server,
        clock,
        events=events,
        retry_budget_min_per_second=0,
        retry_budget_ratio=1,
    )
    response = get(transport)
    # One call buys one retry. Attempt 1 failed; its retry was charged, then
    # refused by the quota: given back. The wait for the reset was charged
    # instead, and attempt 3 went; its own retry found the budget spent.
    assert response.status_code == 503
    assert server.hits == 2
    assert [e.reason for e in events.of(RejectionEvent)] == ["quota", "retry_budget"]
    # Without the refund, the wait for the reset would have been refused.


def test_quota_reserve_none_reads_no_headers() -> None:
    options = HttpResilienceOptions(quota_reserve=None)
    assert "quota" not in [step.label for step in standard_steps(options)]
    clock = FakeClock()
    server = script(published(remaining=0), 200)
    transport = sync_transport(server, clock, **ONCE, quota_reserve=None)
    get(transport)
    assert get(transport).status_code == 200


async def test_the_async_transport_refuses_the_same_way() -> None:
    clock = FakeClock()
    server = script(published(remaining=0), 200)
    transport = async_transport(server, clock, **ONCE)
    await transport.handle_async_request(httpx.Request("GET", URL))
    with pytest.raises(RateLimitedError):
        await transport.handle_async_request(httpx.Request("GET", URL))
    assert server.hits == 1


def test_the_options_refuse_a_reserve_of_one_or_more() -> None:
    with pytest.raises(ValueError, match="less than 1"):
        QuotaOptions(quota_reserve=1.0)
    assert QuotaOptions().quota_reserve == 0.1
