"""`IdempotencyKeyMiddleware`: the key checked and set, the answer kept and replayed."""

from __future__ import annotations

import base64
import json
import logging
import pathlib
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import create_async_engine

from mediator import (
    AsyncIdempotencyStore,
    BusinessRuleError,
    Claim,
    Principal,
    StoredOutcome,
    TransientDatabaseError,
    current_idempotency_key,
)
from mediator._behaviors.idempotency.marker import ScopeMode, scope_of
from mediator.asgi import (
    DomainErrorMiddleware,
    IdempotencyKeyMiddleware,
    RequestContextMiddleware,
)
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    acreate_idempotency_table,
)

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
KEY = "order-7"


# --- fakes ----------------------------------------------------------------------------


@dataclass
class Record:
    fingerprint: str
    token: str
    state: str = "pending"
    outcome: StoredOutcome | None = None
    lease_until: datetime = NOW
    kept_until: datetime = NOW


@dataclass
class FakeStore:
    """The contract in memory: one record per (scope, key); every call noted."""

    records: dict[tuple[str, str], Record] = field(
        default_factory=dict[tuple[str, str], Record]
    )
    calls: list[tuple[Any, ...]] = field(default_factory=list[tuple[Any, ...]])
    fail_finish: bool = False

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        self.calls.append(("claim", scope, key, now, lease, retention))
        found = self.records.get((scope, key))
        if found is not None and found.fingerprint != fingerprint:
            return Claim("mismatch")
        if found is not None and found.state == "completed":
            return Claim("replay", outcome=found.outcome)
        if found is not None and found.lease_until > now:
            return Claim("in_flight")
        token = uuid.uuid4().hex
        self.records[scope, key] = Record(
            fingerprint, token, lease_until=now + lease, kept_until=now + retention
        )
        return Claim("claimed", token=token)

    async def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        raise AssertionError("the middleware completes outside any unit of work")

    async def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        self.calls.append(("finish", scope, key, now))
        if self.fail_finish:
            raise OSError("the database went away")
        record = self.records[scope, key]
        if record.token == token:
            record.state, record.outcome = "completed", outcome

    async def release(self, scope: str, key: str, token: str) -> None:
        self.calls.append(("release", scope, key))
        record = self.records.get((scope, key))
        if record is not None and record.token == token:
            del self.records[scope, key]

    async def purge_expired(self, *, now: datetime) -> int:
        raise AssertionError("not the middleware's to call")

    def kinds(self) -> list[str]:
        return [call[0] for call in self.calls]


class Orders:
    """An ASGI app that answers with a counter, the key and the body it read."""

    def __init__(
        self,
        status: int = 201,
        headers: list[tuple[bytes, bytes]] | None = None,
        chunks: int = 1,
    ) -> None:
        self.status = status
        self.headers = headers or [
            (b"content-type", b"application/json"),
            (b"location", b"/orders/1"),
        ]
        self.chunks = chunks
        self.runs = 0
        self.keys: list[str | None] = []
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.runs += 1
        self.keys.append(current_idempotency_key())
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        answer = json.dumps({"run": self.runs, "body": body.decode()}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": self.headers,
            }
        )
        size = -(-len(answer) // self.chunks)
        parts = [answer[at : at + size] for at in range(0, len(answer), size)]
        for index, part in enumerate(parts):
            await send(
                {
                    "type": "http.response.body",
                    "body": part,
                    "more_body": index < len(parts) - 1,
                }
            )


def keyed(store: FakeStore, app: App, **options: Any) -> IdempotencyKeyMiddleware:
    # Most tests here are about what is kept, sent by one anonymous caller: they
    # opt in. The callers' scopes have tests of their own.
    options.setdefault("anonymous", ["/"])
    return IdempotencyKeyMiddleware(
        app, store_factory=lambda: store, now=lambda: NOW, **options
    )


async def post(
    app: App,
    key: str | None = KEY,
    *,
    json_body: Any = None,
    path: str = "/orders",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    sent = dict(headers or {})
    if key is not None:
        sent["Idempotency-Key"] = key
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://shop.local"
    ) as client:
        return await client.request(
            method,
            path,
            json={"sku": "A-1"} if json_body is None else json_body,
            headers=sent,
        )


async def call_raw(
    app: App,
    headers: list[tuple[bytes, bytes]],
    body: list[bytes] | None = None,
    *,
    method: str = "POST",
    disconnect: bool = False,
) -> list[Message]:
    """Drive `app` with raw header bytes and body chunks, which httpx would not."""
    sent: list[Message] = []
    chunks = [b""] if body is None else list(body)

    async def receive() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        if disconnect:
            return {"type": "http.disconnect"}
        raise AssertionError("receive called after the whole body")

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "method": method,
        "path": "/orders",
        "query_string": b"",
        "headers": headers,
    }
    await app(scope, receive, send)
    return sent


def problem(response: httpx.Response) -> tuple[int, str, str]:
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == "about:blank"
    assert body["status"] == response.status_code
    return response.status_code, body["title"], body["detail"]


# --- the key in the context -----------------------------------------------------------


async def test_the_key_is_set_for_the_app() -> None:
    app = Orders()
    response = await post(IdempotencyKeyMiddleware(app))
    assert response.status_code == 201
    assert app.keys == [KEY]
    assert current_idempotency_key() is None


async def test_without_a_key_the_request_goes_through_as_it_came() -> None:
    app = Orders()
    response = await post(IdempotencyKeyMiddleware(app), key=None)
    assert (response.status_code, app.keys) == (201, [None])


async def test_without_a_store_each_request_runs_the_app() -> None:
    app = Orders()
    middleware = IdempotencyKeyMiddleware(app)
    first, second = await post(middleware), await post(middleware)
    assert (first.json()["run"], second.json()["run"]) == (1, 2)
    assert "idempotent-replayed" not in second.headers


async def test_other_methods_and_scopes_pass_untouched() -> None:
    app = Orders()
    store = FakeStore()
    middleware = keyed(store, app, required=["/"])
    response = await post(middleware, key="", method="PUT")
    assert (response.status_code, app.keys) == (201, [None])
    seen: list[str] = []

    async def lifespan_app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    await IdempotencyKeyMiddleware(lifespan_app, required=["/"])(
        {"type": "lifespan"}, call_never, call_never
    )
    assert seen == ["lifespan"]
    assert store.calls == []


async def call_never(*args: Any) -> Any:
    raise AssertionError("not to be called")


async def test_the_methods_may_be_chosen() -> None:
    app = Orders()
    middleware = IdempotencyKeyMiddleware(app, methods=["put"], required=["/orders"])
    assert (await post(middleware, key=None, method="PUT")).status_code == 400
    assert (await post(middleware, key=None)).status_code == 201


async def test_the_header_may_be_named() -> None:
    app = Orders()
    middleware = IdempotencyKeyMiddleware(app, header="X-Request-Key")
    await post(middleware, key=None, headers={"X-Request-Key": "k-9"})
    assert app.keys == ["k-9"]


# --- a required key ---------------------------------------------------------------


async def test_a_missing_key_on_a_required_route_is_a_400() -> None:
    app = Orders()
    store = FakeStore()
    response = await post(keyed(store, app, required=["/orders"]), key=None)
    assert problem(response) == (
        400,
        "Bad Request",
        "This request needs an Idempotency-Key header.",
    )
    assert (app.runs, store.calls) == (0, [])


@pytest.mark.parametrize(
    ("path", "needs"),
    [
        ("/orders", True),
        ("/orders/7", True),
        ("/orders-archive", False),
        ("/carts", False),
    ],
)
async def test_prefixes_cover_whole_path_segments(path: str, needs: bool) -> None:
    middleware = IdempotencyKeyMiddleware(Orders(), required=["/orders/"])
    response = await post(middleware, key=None, path=path)
    assert response.status_code == (400 if needs else 201)


async def test_the_prefix_slash_covers_every_route() -> None:
    middleware = IdempotencyKeyMiddleware(Orders(), required=("/",))
    assert (await post(middleware, key=None, path="/x")).status_code == 400


async def test_required_may_be_a_test_of_the_scope() -> None:
    def needs(scope: Scope) -> bool:
        return bool(scope["path"].endswith("/pay"))

    middleware = IdempotencyKeyMiddleware(Orders(), required=needs)
    assert (await post(middleware, key=None, path="/o/1/pay")).status_code == 400
    assert (await post(middleware, key=None, path="/o/1")).status_code == 201


# --- malformed keys ------------------------------------------------------------------

MALFORMED = (
    400,
    "Bad Request",
    "The Idempotency-Key header must be sent once, with 1 to 255 visible ASCII "
    "characters.",
)


@pytest.mark.parametrize(
    "headers",
    [
        [(b"idempotency-key", b"")],
        [(b"idempotency-key", b"a" * 256)],
        [(b"idempotency-key", b"a" * 10_240)],
        [(b"idempotency-key", b"caf\xc3\xa9")],
        [(b"idempotency-key", b"tab\there")],
        [(b"idempotency-key", b"nul\x00")],
        [(b"idempotency-key", b"del\x7f")],
        [(b"idempotency-key", b"has space")],
        [(b"idempotency-key", b'"unclosed')],
        [(b"idempotency-key", b'""')],
        [(b"Idempotency-Key", b"one"), (b"idempotency-key", b"two")],
    ],
    ids=[
        "empty",
        "256",
        "10KB",
        "non-ascii",
        "tab",
        "nul",
        "del",
        "space",
        "unclosed-quote",
        "empty-quoted",
        "twice",
    ],
)
async def test_a_malformed_key_is_a_400_and_nothing_is_stored(
    headers: list[tuple[bytes, bytes]],
) -> None:
    app = Orders()
    store = FakeStore()
    sent = await call_raw(keyed(store, app), headers, [b"{}"])
    start, body = sent
    assert start["status"] == 400
    assert (b"content-type", b"application/problem+json") in start["headers"]
    assert json.loads(body["body"])["detail"] == MALFORMED[2]
    assert (app.runs, store.calls) == (0, [])


async def test_the_malformed_problem_does_not_quote_the_key() -> None:
    response = await post(IdempotencyKeyMiddleware(Orders()), key="has space")
    assert problem(response) == MALFORMED
    assert "has space" not in response.text


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b"a" * 255, "a" * 255),
        (b"  padded\t", "padded"),
        (b'"order-7"', "order-7"),
        (b'"say \\"hi\\""', None),  # a space inside: still no key
        (b'"back\\\\slash"', "back\\slash"),
        (b"!~", "!~"),
    ],
)
async def test_plain_and_quoted_keys(raw: bytes, key: str | None) -> None:
    app = Orders()
    sent = await call_raw(IdempotencyKeyMiddleware(app), [(b"idempotency-key", raw)])
    if key is None:
        assert sent[0]["status"] == 400
    else:
        assert app.keys == [key]


async def test_a_quoted_key_is_the_same_key_as_the_plain_one() -> None:
    app = Orders()
    store = FakeStore()
    middleware = keyed(store, app)
    await post(middleware, key=KEY)
    replayed = await post(middleware, key=f'"{KEY}"')
    assert replayed.headers["idempotent-replayed"] == "true"
    assert app.runs == 1


# --- the answer kept and replayed ----------------------------------------------------


async def test_the_same_request_again_is_answered_from_the_store() -> None:
    app = Orders(
        headers=[
            (b"content-type", b"application/json"),
            (b"location", b"/orders/1"),
            (b"set-cookie", b"session=secret"),
            (b"x-internal", b"no"),
        ]
    )
    store = FakeStore()
    middleware = keyed(store, app)
    first = await post(middleware)
    second = await post(middleware)
    assert app.runs == 1
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.content == first.content
    assert first.json() == {"run": 1, "body": '{"sku":"A-1"}'}
    assert dict(second.headers) == {
        "content-type": "application/json",
        "location": "/orders/1",
        "content-length": str(len(first.content)),
        "idempotent-replayed": "true",
    }
    assert "idempotent-replayed" not in first.headers
    assert first.headers["set-cookie"] == "session=secret"
    assert store.kinds() == ["claim", "finish", "claim"]


async def test_the_claim_is_scoped_by_route_and_told_the_times() -> None:
    store = FakeStore()
    await post(
        keyed(
            store,
            Orders(),
            lease=timedelta(seconds=30),
            retention=timedelta(days=2),
        ),
        path="/orders/7",
    )
    scope = http_scope(None, "/orders/7")
    assert store.calls[0] == (
        "claim",
        scope,
        KEY,
        NOW,
        timedelta(seconds=30),
        timedelta(days=2),
    )
    assert store.calls[1] == ("finish", scope, KEY, NOW)


async def test_the_kept_answer_is_status_headers_and_base64_body() -> None:
    store = FakeStore()
    response = await post(keyed(store, Orders(chunks=3)))
    [record] = store.records.values()
    assert record.outcome is not None
    assert (record.outcome.kind, record.outcome.type_name) == ("response", "http")
    assert json.loads(record.outcome.payload) == {
        "status": 201,
        "headers": [
            ["content-type", "application/json"],
            ["location", "/orders/1"],
        ],
        "body": base64.b64encode(response.content).decode(),
    }


async def test_marked_headers_are_kept_too() -> None:
    app = Orders(
        headers=[(b"content-type", b"text/plain"), (b"ETag", b'"v1"')],
    )
    store = FakeStore()
    middleware = keyed(store, app, replay_headers=["etag"])
    await post(middleware)
    replayed = await post(middleware)
    assert replayed.headers["etag"] == '"v1"'


async def test_the_app_reads_the_whole_body_once_read_by_the_middleware() -> None:
    app = Orders()
    store = FakeStore()
    sent = await call_raw(
        keyed(store, app),
        [(b"idempotency-key", b"k")],
        [b'{"sku":', b'"A-1"', b"}"],
    )
    assert app.bodies == [b'{"sku":"A-1"}']
    assert sent[0]["status"] == 201


async def test_a_domain_error_answer_is_kept() -> None:
    runs: list[int] = []

    async def refuses(scope: Scope, receive: Receive, send: Send) -> None:
        runs.append(1)
        raise BusinessRuleError("out of stock")

    store = FakeStore()
    middleware = keyed(store, DomainErrorMiddleware(refuses))
    first, second = await post(middleware), await post(middleware)
    assert (first.status_code, second.status_code) == (422, 422)
    assert second.content == first.content
    assert second.headers["content-type"] == "application/problem+json"
    assert runs == [1]


# --- tenants --------------------------------------------------------------------------


def principal_of(scope: Scope) -> Principal | None:
    headers = dict(scope["headers"])
    user = headers.get(b"x-user")
    if user is None:
        return None
    tenant = headers.get(b"x-tenant")
    claims = {} if tenant is None else {"tenant": tenant.decode()}
    return Principal(user.decode(), claims=claims)


def http_scope(
    principal: Principal | None,
    path: str = "/orders",
    mode: ScopeMode = "principal",
    method: str = "POST",
) -> str:
    return scope_of(principal, (("http", method), ("path", path)), mode=mode)


@pytest.mark.parametrize(
    ("headers", "principal"),
    [
        ({}, None),
        ({"X-User": "u-1"}, Principal("u-1")),
        (
            {"X-User": "u-1", "X-Tenant": "acme"},
            Principal("u-1", claims={"tenant": "acme"}),
        ),
    ],
)
async def test_the_scope_comes_from_the_principal(
    headers: dict[str, str], principal: Principal | None
) -> None:
    store = FakeStore()
    app = RequestContextMiddleware(keyed(store, Orders()), principal=principal_of)
    await post(app, headers=headers)
    assert store.calls[0][1] == http_scope(principal)
    assert store.calls[0][1].startswith("s1:")
    assert len(store.calls[0][1]) == 67


async def test_the_principal_left_in_the_scope_is_read_too() -> None:
    store = FakeStore()
    middleware = keyed(store, Orders())
    principal = Principal("u-2", claims={"tenant": "t-2"})

    async def outside(scope: Scope, receive: Receive, send: Send) -> None:
        scope["mediator.principal"] = principal
        await middleware(scope, receive, send)

    await post(outside)
    assert store.calls[0][1] == http_scope(principal)


async def test_the_same_key_from_two_users_of_a_tenant_is_two_operations() -> None:
    app = Orders()
    store = FakeStore()
    middleware = RequestContextMiddleware(keyed(store, app), principal=principal_of)
    acme = await post(middleware, headers={"X-User": "u", "X-Tenant": "acme"})
    other = await post(middleware, headers={"X-User": "u", "X-Tenant": "other"})
    again = await post(middleware, headers={"X-User": "v", "X-Tenant": "acme"})
    same = await post(middleware, headers={"X-User": "u", "X-Tenant": "acme"})
    assert [r.json()["run"] for r in (acme, other, again)] == [1, 2, 3]
    assert "idempotent-replayed" not in again.headers
    assert same.headers["idempotent-replayed"] == "true"
    assert app.runs == 3


async def test_with_the_tenant_scope_a_tenants_users_share_an_answer() -> None:
    app = Orders()
    store = FakeStore()
    middleware = RequestContextMiddleware(
        keyed(store, app, scope="tenant"), principal=principal_of
    )
    acme = await post(middleware, headers={"X-User": "u", "X-Tenant": "acme"})
    again = await post(middleware, headers={"X-User": "v", "X-Tenant": "acme"})
    named = await post(middleware, headers={"X-User": "acme"})
    assert again.headers["idempotent-replayed"] == "true"
    assert (acme.json()["run"], named.json()["run"]) == (1, 2)
    assert store.calls[0][1] == http_scope(
        Principal("v", claims={"tenant": "acme"}), mode="tenant"
    )


# --- anonymous callers ----------------------------------------------------------------


async def test_an_anonymous_keyed_request_is_a_401_and_nothing_is_stored() -> None:
    app = Orders()
    store = FakeStore()
    middleware = IdempotencyKeyMiddleware(
        app,
        store_factory=lambda: store,
        www_authenticate='Bearer realm="shop"',
    )
    answer = await post(middleware)
    assert problem(answer) == (
        401,
        "Unauthorized",
        "A request with an Idempotency-Key needs an authenticated caller.",
    )
    assert answer.headers["www-authenticate"] == 'Bearer realm="shop"'
    assert (app.runs, store.calls) == (0, [])


async def test_the_401_carries_no_challenge_unless_given() -> None:
    answer = await post(IdempotencyKeyMiddleware(Orders(), store_factory=FakeStore))
    assert answer.status_code == 401
    assert "www-authenticate" not in answer.headers


async def test_without_a_store_an_anonymous_key_is_only_set() -> None:
    app = Orders()
    answer = await post(IdempotencyKeyMiddleware(app))
    assert answer.status_code == 201
    assert app.keys == [KEY]


def _under_orders(scope: Scope) -> bool:
    return str(scope["path"]).startswith("/orders")


@pytest.mark.parametrize(
    "anonymous", [["/orders"], _under_orders], ids=["prefixes", "callable"]
)
async def test_routes_named_anonymous_take_anonymous_keys(anonymous: Any) -> None:
    app = Orders()
    store = FakeStore()
    middleware = keyed(store, app, anonymous=anonymous)
    first = await post(middleware, path="/orders/1")
    again = await post(middleware, path="/orders/1")
    elsewhere = await post(middleware, path="/payments")
    assert again.headers["idempotent-replayed"] == "true"
    assert first.json() == again.json()
    assert elsewhere.status_code == 401
    assert app.runs == 1
    assert store.calls[0][1] == http_scope(None, "/orders/1")


# --- mismatch and in flight ---------------------------------------------------------


async def test_the_key_with_another_body_is_a_422() -> None:
    app = Orders()
    store = FakeStore()
    middleware = keyed(store, app)
    await post(middleware)
    response = await post(middleware, json_body={"sku": "B-2"})
    assert problem(response) == (
        422,
        "Unprocessable Content",
        "This Idempotency-Key was used with another request.",
    )
    assert app.runs == 1


async def test_the_key_with_another_query_string_is_a_422() -> None:
    app = Orders()
    store = FakeStore()
    middleware = keyed(store, app)
    await post(middleware, path="/orders?express=1")
    response = await post(middleware, path="/orders?express=0")
    assert response.status_code == 422
    assert app.runs == 1


async def test_the_key_while_its_first_request_runs_is_a_409() -> None:
    store = FakeStore()
    entered, leave = anyio.Event(), anyio.Event()
    inner = Orders()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        entered.set()
        await leave.wait()
        await inner(scope, receive, send)

    middleware = keyed(store, slow)
    answers: list[httpx.Response] = []

    async def first() -> None:
        answers.append(await post(middleware))

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await entered.wait()
        answers.append(await post(middleware))
        leave.set()
    duplicate = answers.pop(0)
    assert problem(duplicate) == (
        409,
        "Conflict",
        "A request with this Idempotency-Key is still being processed. "
        "Try again later.",
    )
    assert duplicate.headers["retry-after"] == "1"
    assert [answer.status_code for answer in answers] == [201]
    assert inner.runs == 1


async def test_a_claim_the_store_refuses_for_now_is_a_503() -> None:
    """Outside DomainErrorMiddleware, so answered by the middleware: not a 500."""

    class Locked(FakeStore):
        async def claim(
            self,
            scope: str,
            key: str,
            fingerprint: str,
            *,
            now: datetime,
            lease: timedelta,
            retention: timedelta,
        ) -> Claim:
            raise TransientDatabaseError("the transaction was refused, try again")

    inner = Orders()
    answer = await post(keyed(Locked(), inner))
    assert problem(answer) == (
        503,
        "Service Unavailable",
        "This Idempotency-Key could not be checked for now. Try again later.",
    )
    assert answer.headers["retry-after"] == "1"
    assert inner.runs == 0


class Broken(FakeStore):
    """A store whose every call fails with `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        raise self.error


class DataError(Exception):
    """What a DB-API driver raises for values it refuses (PEP 249's name)."""


@pytest.mark.parametrize(
    ("error", "status", "detail"),
    [
        (
            OSError(f"connection refused while claiming {KEY}"),
            503,
            "This Idempotency-Key could not be checked for now. Try again later.",
        ),
        (
            RuntimeError(f"pool exhausted for {KEY}"),
            503,
            "This Idempotency-Key could not be checked for now. Try again later.",
        ),
        (
            ValueError(f"bad value {KEY}"),
            400,
            "This request cannot be kept with an Idempotency-Key.",
        ),
        (
            DataError(f"text fields cannot contain NUL: {KEY}"),
            400,
            "This request cannot be kept with an Idempotency-Key.",
        ),
    ],
    ids=["os", "runtime", "value", "data"],
)
async def test_a_failing_claim_is_a_503_or_a_400_never_a_500(
    caplog: pytest.LogCaptureFixture, error: Exception, status: int, detail: str
) -> None:
    inner = Orders()
    with caplog.at_level(logging.ERROR, logger="mediator.asgi"):
        answer = await post(keyed(Broken(error), inner))
    assert problem(answer)[::2] == (status, detail)
    assert ("retry-after" in answer.headers) is (status == 503)
    assert inner.runs == 0
    [record] = caplog.records
    assert record.getMessage() == (
        "could not check the idempotency key of POST /orders (the store raised "
        f"{type(error).__qualname__})"
    )
    assert record.exc_info is None
    assert KEY not in caplog.text


async def test_a_failing_release_is_logged_once_and_the_answer_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Stuck(FakeStore):
        async def release(self, scope: str, key: str, token: str) -> None:
            raise OSError(f"the database went away holding {key}")

    with caplog.at_level(logging.ERROR, logger="mediator.asgi"):
        answer = await post(keyed(Stuck(), Orders(status=503)))
    assert answer.status_code == 503
    [record] = caplog.records
    assert record.getMessage().endswith("(the store raised OSError)")
    assert KEY not in caplog.text


@pytest.mark.parametrize("status", [201, 500])
async def test_the_answer_is_settled_before_its_last_chunk_leaves(status: int) -> None:
    store = FakeStore()
    seen: list[str] = []
    middleware = keyed(store, Orders(status=status, chunks=3))

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            last = not message.get("more_body", False)
            seen.append(f"{'last' if last else 'chunk'} after {store.kinds()[1:]}")

    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/orders",
        "query_string": b"",
        "headers": [(b"idempotency-key", KEY.encode())],
    }
    bodies = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        return bodies.pop(0)

    await middleware(scope, receive, send)
    settled = "finish" if status == 201 else "release"
    assert seen == ["chunk after []", "chunk after []", f"last after ['{settled}']"]
    assert store.kinds() == ["claim", settled]


async def test_an_error_after_the_answer_was_kept_keeps_it() -> None:
    store = FakeStore()

    async def then_fails(scope: Scope, receive: Receive, send: Send) -> None:
        await Orders()(scope, receive, send)
        raise RuntimeError("a background task failed")

    middleware = keyed(store, then_fails)
    with pytest.raises(RuntimeError, match="background task"):
        await call_raw(middleware, [(b"idempotency-key", b"k")])
    assert store.kinds() == ["claim", "finish"]
    [record] = store.records.values()
    assert record.state == "completed"


# --- answers not kept: the key is given back ----------------------------------------


@pytest.mark.parametrize("status", [500, 503, 408, 409, 425, 429, 404, 405])
async def test_a_try_again_answer_gives_the_key_back(status: int) -> None:
    app = Orders(status=status)
    store = FakeStore()
    middleware = keyed(store, app)
    first, second = await post(middleware), await post(middleware)
    assert (first.status_code, second.status_code) == (status, status)
    assert app.runs == 2
    assert store.kinds() == ["claim", "release", "claim", "release"]
    assert store.records == {}


@pytest.mark.parametrize("status", [200, 204, 303, 400, 403, 422])
async def test_a_final_answer_is_kept(status: int) -> None:
    app = Orders(status=status)
    store = FakeStore()
    middleware = keyed(store, app)
    await post(middleware)
    replayed = await post(middleware)
    assert replayed.status_code == status
    assert app.runs == 1


async def test_an_exception_gives_the_key_back_and_is_raised() -> None:
    store = FakeStore()

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await post(keyed(store, broken))
    assert store.kinds() == ["claim", "release"]
    assert store.records == {}


async def test_a_failing_release_does_not_hide_the_apps_error() -> None:
    class Unreleasable(FakeStore):
        async def release(self, scope: str, key: str, token: str) -> None:
            raise OSError("the database went away")

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await post(keyed(Unreleasable(), broken))


async def test_an_answer_over_the_limit_is_sent_but_not_kept() -> None:
    app = Orders(chunks=4)
    store = FakeStore()
    middleware = keyed(store, app, max_response_bytes=10)
    first, second = await post(middleware), await post(middleware)
    assert first.json()["run"] == 1
    assert second.json()["run"] == 2
    assert store.kinds() == ["claim", "release", "claim", "release"]


async def test_other_messages_are_passed_on_and_not_kept() -> None:
    async def with_trailers(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "trailers": True})
        await send({"type": "http.response.body", "body": b"ok"})
        await send({"type": "http.response.trailers", "headers": []})

    store = FakeStore()
    middleware = keyed(store, with_trailers)
    sent = await call_raw(middleware, [(b"idempotency-key", b"k")])
    assert [message["type"] for message in sent][-1] == "http.response.trailers"
    replayed = await call_raw(middleware, [(b"idempotency-key", b"k")])
    assert [message["type"] for message in replayed] == [
        "http.response.start",
        "http.response.body",
    ]
    assert replayed[1]["body"] == b"ok"


async def test_an_app_that_never_answers_gives_the_key_back() -> None:
    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    store = FakeStore()
    await call_raw(keyed(store, silent), [(b"idempotency-key", b"k")])
    assert store.kinds() == ["claim", "release"]


async def test_a_failing_finish_is_logged_and_the_answer_still_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(fail_finish=True)
    with caplog.at_level(logging.ERROR, logger="mediator.asgi"):
        response = await post(keyed(store, Orders()))
    assert response.status_code == 201
    [record] = caplog.records
    assert record.getMessage() == (
        "could not record the answer to POST /orders with its idempotency key "
        "(the store raised OSError)"
    )
    assert KEY not in caplog.text


# --- the request body ---------------------------------------------------------------


async def test_a_body_over_the_limit_is_a_413_and_nothing_is_claimed() -> None:
    app = Orders()
    store = FakeStore()
    sent = await call_raw(
        keyed(store, app, max_body_bytes=8),
        [(b"idempotency-key", b"k")],
        [b"12345", b"6789"],
    )
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"]) == {
        "type": "about:blank",
        "title": "Content Too Large",
        "status": 413,
        "detail": "A request with an Idempotency-Key takes a body of at most 8 bytes.",
    }
    assert (app.runs, store.calls) == (0, [])


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    store = FakeStore()
    sent = await call_raw(
        keyed(store, Orders(), max_body_bytes=8),
        [(b"idempotency-key", b"k"), (b"content-length", b"9")],
        [],
    )
    assert sent[0]["status"] == 413
    assert store.calls == []


async def test_a_caller_gone_while_sending_its_body_gets_nothing() -> None:
    store = FakeStore()
    app = Orders()
    sent = await call_raw(
        keyed(store, app),
        [(b"idempotency-key", b"k")],
        [],
        disconnect=True,
    )
    assert (sent, store.calls, app.runs) == ([], [], 0)


async def test_after_the_body_the_app_hears_the_callers_messages() -> None:
    heard: list[str] = []

    async def listening(scope: Scope, receive: Receive, send: Send) -> None:
        heard.append((await receive())["type"])
        heard.append((await receive())["type"])
        await send({"type": "http.response.start", "status": 204})
        await send({"type": "http.response.body", "body": b""})

    await call_raw(
        keyed(FakeStore(), listening),
        [(b"idempotency-key", b"k")],
        [b"{}"],
        disconnect=True,
    )
    assert heard == ["http.request", "http.disconnect"]


# --- a store that breaks the contract -----------------------------------------------


async def test_a_factory_returning_no_store_is_a_type_error() -> None:
    middleware = IdempotencyKeyMiddleware(
        Orders(),
        store_factory=lambda: object(),  # type: ignore[arg-type,return-value]  # pyright: ignore[reportArgumentType]
        anonymous=["/"],
    )
    with pytest.raises(TypeError, match="must return an AsyncIdempotencyStore"):
        await post(middleware)


async def test_a_claim_without_a_token_is_refused() -> None:
    class Tokenless(FakeStore):
        async def claim(self, *args: Any, **kwargs: Any) -> Claim:
            return Claim("claimed")

    with pytest.raises(RuntimeError, match="breaks its contract"):
        await post(keyed(Tokenless(), Orders()))


@pytest.mark.parametrize(
    "outcome",
    [
        StoredOutcome("response", "shop:OrderView", '{"id": 1}'),
        StoredOutcome("error", "http", '{"message": "x", "errors": []}'),
        StoredOutcome("response", "http", "not json"),
        StoredOutcome("response", "http", '{"status": 201, "headers": []}'),
        StoredOutcome(
            "response", "http", '{"status": "201", "headers": [], "body": ""}'
        ),
        StoredOutcome(
            "response", "http", '{"status": 201, "headers": [], "body": "!"}'
        ),
    ],
    ids=["other-type", "error", "not-json", "no-body", "status-text", "bad-base64"],
)
async def test_a_stored_answer_not_kept_by_the_middleware_is_refused(
    outcome: StoredOutcome,
) -> None:
    class Foreign(FakeStore):
        async def claim(self, *args: Any, **kwargs: Any) -> Claim:
            return Claim("replay", outcome=outcome)

    with pytest.raises(RuntimeError, match="not one IdempotencyKeyMiddleware kept"):
        await post(keyed(Foreign(), Orders()))


def test_the_fake_store_keeps_the_contract() -> None:
    assert isinstance(FakeStore(), AsyncIdempotencyStore)


# --- construction -------------------------------------------------------------------


def test_the_defaults() -> None:
    middleware = IdempotencyKeyMiddleware(Orders())
    assert middleware.store_factory is None
    assert middleware.methods == ("POST", "PATCH")
    assert middleware.header == "Idempotency-Key"
    assert middleware.max_body_bytes == 1_048_576
    assert middleware.max_response_bytes == 1_048_576
    assert middleware.lease == timedelta(minutes=1)
    assert middleware.retention == timedelta(hours=24)
    assert middleware.required == ()
    assert middleware.replay_headers == ()
    assert middleware.scope == "principal"
    assert middleware.anonymous == ()
    assert middleware.www_authenticate is None


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"store_factory": 3}, TypeError, "store_factory must be a callable"),
        ({"now": "today"}, TypeError, "now must be a callable returning a datetime"),
        ({"required": "/orders"}, TypeError, "required must be a callable"),
        ({"required": 3}, TypeError, "required must be a callable"),
        ({"anonymous": "/orders"}, TypeError, "anonymous must be a callable"),
        (
            {"anonymous": ["orders"]},
            ValueError,
            "anonymous path prefixes must be strings starting with '/', got 'orders'",
        ),
        ({"scope": "user"}, ValueError, "scope must be 'principal' or 'tenant', got"),
        ({"scope": ["tenant"]}, ValueError, "scope must be 'principal' or 'tenant'"),
        ({"www_authenticate": 3}, TypeError, "www_authenticate must be a string"),
        (
            {"www_authenticate": "Bearer\r\nX: y"},
            ValueError,
            "www_authenticate must be a non-empty header value",
        ),
        (
            {"required": ["orders"]},
            ValueError,
            "required path prefixes must be strings starting with '/', got 'orders'",
        ),
        ({"methods": "POST"}, TypeError, "methods must be a collection"),
        ({"methods": []}, ValueError, "methods must name at least one HTTP method"),
        ({"methods": ["PO ST"]}, ValueError, "methods must be HTTP methods"),
        ({"header": "bad header"}, ValueError, "header must be an HTTP header name"),
        ({"header": 3}, TypeError, "header must be an HTTP header name"),
        ({"replay_headers": "etag"}, TypeError, "replay_headers must be a collection"),
        (
            {"replay_headers": ["ETag", "Set-Cookie", "Content-Length"]},
            ValueError,
            "replay_headers may not name content-length, set-cookie",
        ),
        ({"replay_headers": ["a b"]}, ValueError, "replay_headers must be an HTTP"),
        ({"max_body_bytes": 0}, ValueError, "max_body_bytes must be positive, got 0"),
        ({"max_body_bytes": 1.5}, TypeError, "max_body_bytes must be a whole number"),
        ({"max_response_bytes": True}, TypeError, "max_response_bytes must be a whole"),
        (
            {"max_response_bytes": -1},
            ValueError,
            "max_response_bytes must be positive",
        ),
        ({"lease": 60}, TypeError, "lease must be a timedelta, got int"),
        ({"retention": "1d"}, TypeError, "retention must be a timedelta, got str"),
        ({"lease": timedelta(0)}, ValueError, "lease must be positive"),
        (
            {"retention": timedelta(days=3651)},
            ValueError,
            "retention must be at most 3650 days",
        ),
        (
            {"lease": timedelta(hours=2), "retention": timedelta(hours=1)},
            ValueError,
            r"retention \(1:00:00\) must be at least the lease \(2:00:00\)",
        ),
    ],
)
def test_bad_arguments_are_refused_at_construction(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        IdempotencyKeyMiddleware(Orders(), **options)


def test_an_app_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="app must be an ASGI application"):
        IdempotencyKeyMiddleware(3)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


# --- on FastAPI -----------------------------------------------------------------------


class OrderForm(BaseModel):
    sku: str


async def test_on_fastapi_the_route_reads_the_body_and_is_replayed() -> None:
    placed: list[tuple[str, str | None]] = []
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def place(order: OrderForm) -> dict[str, int]:  # pyright: ignore[reportUnusedFunction]
        placed.append((order.sku, current_idempotency_key()))
        return {"order": len(placed)}

    store = FakeStore()
    app.add_middleware(IdempotencyKeyMiddleware, store_factory=lambda: store)
    app.add_middleware(RequestContextMiddleware, principal=principal_of)
    first = await post(app, headers={"X-User": "u-1"})
    second = await post(app, headers={"X-User": "u-1"})
    other = await post(app, key="order-8", headers={"X-User": "u-1"})
    assert (first.status_code, first.json()) == (201, {"order": 1})
    assert (second.status_code, second.json()) == (201, {"order": 1})
    assert second.headers["idempotent-replayed"] == "true"
    assert other.json() == {"order": 2}
    assert placed == [("A-1", KEY), ("A-1", "order-8")]


# --- on the SQLAlchemy store ----------------------------------------------------------


async def test_concurrent_duplicates_on_sqlite_run_the_app_once(
    tmp_path: pathlib.Path,
) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/keys.db")
    await acreate_idempotency_table(engine)
    app = Orders()
    middleware = IdempotencyKeyMiddleware(
        app,
        store_factory=lambda: AsyncSqlAlchemyIdempotencyStore(engine),
        anonymous=["/orders"],
    )
    answers: list[httpx.Response] = []
    try:
        transport = httpx.ASGITransport(app=middleware)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://shop") as client,
            anyio.create_task_group() as group,
        ):

            async def one() -> None:
                answers.append(
                    await client.post(
                        "/orders", json={"sku": "A-1"}, headers={"Idempotency-Key": KEY}
                    )
                )

            for _ in range(20):
                group.start_soon(one)
        again = await post(middleware)
    finally:
        await engine.dispose()
    statuses = sorted(answer.status_code for answer in answers)
    assert set(statuses) <= {201, 409}
    assert app.runs == 1
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == {"run": 1, "body": '{"sku":"A-1"}'}
