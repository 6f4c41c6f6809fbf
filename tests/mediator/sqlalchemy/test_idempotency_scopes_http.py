"""`IdempotencyKeyMiddleware` under a real uvicorn on 127.0.0.1, on the SQLAlchemy
store (SQLite and PostgreSQL): no caller is answered with another's stored answer,
odd paths and tenants never make a 500, unknown routes leave no rows, and a
duplicate sent the moment the first answer arrives is replayed."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import httpx
import pytest

from mediator import Principal, current_principal
from mediator._asgi.types import Message, Receive, Scope, Send
from mediator._behaviors.idempotency.marker import ScopeMode
from mediator.asgi import (
    DomainErrorMiddleware,
    IdempotencyKeyMiddleware,
    RequestContextMiddleware,
)
from mediator.sqlalchemy import AsyncSqlAlchemyIdempotencyStore
from tests.mediator.sqlalchemy.idempotency_db import Backend
from tests.support.fault_server import run_lifespan, serve_app

pytestmark = pytest.mark.anyio


@dataclass
class Orders:
    """POST under /orders answers 201 with a run number and who asked; else 404,
    and 405 for another method on /orders."""

    ready: threading.Event = field(default_factory=threading.Event)
    runs: int = 0
    seen: list[str | None] = field(default_factory=list[str | None])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(cast("Any", receive), cast("Any", send), self.ready)
            return
        while (await receive()).get("more_body", False):
            pass
        path = str(scope["path"])
        if not (path == "/orders" or path.startswith("/orders/")):
            await answer(send, 404, {"title": "Not Found"})
            return
        if scope["method"] != "POST":
            await answer(send, 405, {"title": "Method Not Allowed"})
            return
        self.runs += 1
        principal = current_principal()
        self.seen.append(None if principal is None else principal.id)
        await answer(send, 201, {"run": self.runs})


async def answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
    ]
    start: Message = {"type": "http.response.start", "status": status}
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def principal_of(scope: Scope) -> Principal | None:
    """The caller from test headers: X-User (a JSON string), X-Tenant (the same)."""
    headers = {bytes(k).lower(): bytes(v) for k, v in scope["headers"]}
    user = headers.get(b"x-user")
    if user is None:
        return None
    tenant = headers.get(b"x-tenant")
    claims = {} if tenant is None else {"tenant": json.loads(tenant)}
    return Principal(json.loads(user), claims=claims)


@dataclass
class Service:
    url: str
    app: Orders


Start = Callable[..., "Service"]


@pytest.fixture
def serve(backend: Backend) -> Iterator[Start]:
    """Start the stack on the backend's store with the given options."""
    servers = ExitStack()

    def start(scope: ScopeMode = "principal", **options: Any) -> Service:
        orders = Orders()
        store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
        wrapped = RequestContextMiddleware(
            IdempotencyKeyMiddleware(
                DomainErrorMiddleware(orders),
                store_factory=lambda: store,
                scope=scope,
                **options,
            ),
            principal=principal_of,
        )

        async def app(asgi: Scope, receive: Receive, send: Send) -> None:
            if asgi["type"] == "lifespan":
                await orders(asgi, receive, send)
            else:
                await wrapped(asgi, receive, send)

        url = servers.enter_context(
            serve_app(cast("Any", app), orders.ready, name="idempotency scopes")
        )
        return Service(url, orders)

    with servers:
        yield start


def caller(user: str | None = None, tenant: str | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if user is not None:
        headers["X-User"] = json.dumps(user)
    if tenant is not None:
        headers["X-Tenant"] = json.dumps(tenant)
    return headers


async def post(
    client: httpx.AsyncClient,
    who: dict[str, str],
    path: str = "/orders",
    key: str = "shared-key",
    method: str = "POST",
) -> httpx.Response:
    return await client.request(
        method, path, content=b"{}", headers={**who, "Idempotency-Key": key}
    )


def replayed(response: httpx.Response) -> bool:
    return bool(response.headers.get("idempotent-replayed") == "true")


CROSS = [
    ("an id equal to a tenant", "principal", ("u-1", "acme"), ("acme", None), None),
    ("an id equal to a tenant", "tenant", ("u-1", "acme"), ("acme", None), None),
    # Joined as "<tenant>|HTTP <method> <path>", these two shared a record.
    (
        "a separator in the path",
        "tenant",
        ("u", "acme"),
        ("u", "acme|HTTP POST /orders/"),
        ("/orders/%7CHTTP%20POST%20/orders/1", "/orders/1"),
    ),
    (
        "a separator in the tenant",
        "principal",
        ("u", "a|b"),
        ("u|a", "b"),
        None,
    ),
    ("users of one tenant", "principal", ("ada", "acme"), ("bob", "acme"), None),
]


@pytest.mark.parametrize(
    ("case", "mode", "first", "second", "paths"),
    CROSS,
    ids=[f"{case} ({mode})" for case, mode, *_ in CROSS],
)
async def test_a_crafted_caller_never_gets_anothers_answer(
    serve: Start,
    case: str,
    mode: ScopeMode,
    first: tuple[str, str | None],
    second: tuple[str, str | None],
    paths: tuple[str, str] | None,
) -> None:
    service: Service = serve(mode)
    one, two = paths or ("/orders", "/orders")
    async with httpx.AsyncClient(base_url=service.url) as client:
        a = await post(client, caller(*first), one)
        b = await post(client, caller(*second), two)
        a_again = await post(client, caller(*first), one)
    assert (a.status_code, b.status_code) == (201, 201)
    assert (a.json(), b.json()) == ({"run": 1}, {"run": 2})
    assert not replayed(b)
    assert replayed(a_again)
    assert a_again.json() == {"run": 1}


async def test_with_the_tenant_scope_a_tenants_users_share_the_answer(
    serve: Start,
) -> None:
    service: Service = serve("tenant")
    async with httpx.AsyncClient(base_url=service.url) as client:
        ada = await post(client, caller("ada", "acme"))
        bob = await post(client, caller("bob", "acme"))
    assert replayed(bob)
    assert bob.json() == ada.json() == {"run": 1}
    assert service.app.seen == ["ada"]


async def test_anonymous_keyed_requests_are_refused_and_nothing_is_kept(
    serve: Start, backend: Backend
) -> None:
    service: Service = serve(www_authenticate='Bearer realm="shop"')
    async with httpx.AsyncClient(base_url=service.url) as client:
        refused = await post(client, caller())
        kept = await post(client, caller("u-1"))
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["detail"] == (
        "A request with an Idempotency-Key needs an authenticated caller."
    )
    assert refused.headers["www-authenticate"] == 'Bearer realm="shop"'
    assert kept.status_code == 201
    assert service.app.seen == ["u-1"]
    assert len(backend.rows()) == 1


async def test_anonymous_keys_where_allowed_are_a_scope_of_their_own(
    serve: Start,
) -> None:
    service: Service = serve(anonymous=["/orders"])
    async with httpx.AsyncClient(base_url=service.url) as client:
        user = await post(client, caller(""))  # an empty id is still a principal
        anonymous = await post(client, caller())
        again = await post(client, caller())
    assert (user.json(), anonymous.json()) == ({"run": 1}, {"run": 2})
    assert replayed(again)


ODD = [
    "a|b",
    '"q"',
    "'",
    "%7C",
    "x" * 4096,
    "|" * 2048,
    "caf\u00e9",
]
ODD_PATHS = [
    "/orders/a%7Cb",
    "/orders/a|b",
    '/orders/"q"',
    "/orders/%00",
    "/orders/a%00b",
    "/orders/%FF%FE",
    "/orders/" + "p" * 3000,
    "/orders/" + "%7C" * 1000,
]


async def test_odd_values_on_the_real_store_never_make_a_500(
    serve: Start, backend: Backend
) -> None:
    service: Service = serve("tenant")
    callers = [caller(odd) for odd in ODD] + [caller("u", odd) for odd in ODD]
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=service.url) as client:
        for number, path in enumerate(ODD_PATHS):
            for who in callers:
                first = await post(client, who, path, key=f"k-{number}")
                again = await post(client, who, path, key=f"k-{number}")
                statuses += [first.status_code, again.status_code]
                assert replayed(again), (path[:20], who)
                assert again.json() == first.json()
    assert set(statuses) == {201}
    runs = len(ODD_PATHS) * len(callers)
    assert service.app.runs == runs
    rows = backend.rows()
    scopes = {row.scope for row in rows}
    assert len(rows) == runs
    # "/orders/a%7Cb" and "/orders/a|b" are one route: the server decodes both.
    assert len(scopes) == runs - len(callers)
    assert {len(scope) for scope in scopes} == {67}


WORKERS = 10


async def test_unknown_routes_leave_no_rows(serve: Start, backend: Backend) -> None:
    service: Service = serve()
    statuses: list[int] = []
    # Ten callers at a time, each sending its share in turn: bounded in count,
    # and a timeout generous enough for a busy two-core machine.
    requests = [(number, caller()) for number in range(300)]
    requests += [(number, caller("u-1")) for number in range(300, 400)]
    async with (
        httpx.AsyncClient(base_url=service.url, timeout=60.0) as client,
        anyio.create_task_group() as group,
    ):

        async def share(start: int) -> None:
            for number, who in requests[start::WORKERS]:
                answer = await post(
                    client, who, f"/nowhere/{number}", key=f"fresh-{number}"
                )
                statuses.append(answer.status_code)

        for start in range(WORKERS):
            group.start_soon(share, start)
    async with httpx.AsyncClient(base_url=service.url) as client:
        patched = await post(client, caller("u-1"), method="PATCH", key="p-1")
    assert sorted(statuses) == [401] * 300 + [404] * 100
    assert patched.status_code == 405
    assert backend.rows() == []
    assert service.app.runs == 0


async def test_a_duplicate_sent_the_moment_the_answer_arrives_is_replayed(
    serve: Start,
) -> None:
    service: Service = serve()
    duplicates: list[httpx.Response] = []
    async with httpx.AsyncClient(base_url=service.url) as client:
        for number in range(30):
            await post(client, caller("u-1"), key=f"instant-{number}")
            duplicates.append(
                await post(client, caller("u-1"), key=f"instant-{number}")
            )
    assert [d.status_code for d in duplicates] == [201] * 30
    assert all(replayed(d) for d in duplicates)
    assert service.app.runs == 30
