"""The inventory service the orders service calls: flaky on purpose.

``POST /reservations`` takes ``{"sku", "quantity"}`` and an
``Idempotency-Key``: the same key reserves once, however often it is sent,
and answers the same. Not enough stock is 409. ``GET /stock/{sku}`` answers
what is left of a sku, ``{"sku", "available"}``, or 404. Before either,
`Faults` decides whether this request fails with 503: a share of requests at
random (seeded), and every request during an outage window.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel, Field


@dataclass
class Faults:
    """When the inventory fails: `ratio` of requests, and all within `outage`.

    Attributes:
        ratio: The share of requests answered 503, drawn from `seed`.
        outage: ``(start, end)`` in seconds on `now`: every request within
            it is answered 503. None: no outage.
        now: Seconds since the service started (the demo passes its clock).
    """

    ratio: float = 0.0
    outage: tuple[float, float] | None = None
    now: Callable[[], float] = lambda: 0.0
    seed: int = 7
    _draw: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._draw = random.Random(self.seed)

    def fails(self) -> bool:
        if self.outage is not None and self.outage[0] <= self.now() < self.outage[1]:
            return True
        return self._draw.random() < self.ratio


class StockLevel(BaseModel):
    sku: str
    available: int


class Reservation(BaseModel):
    sku: str = Field(min_length=1, max_length=32)
    quantity: int = Field(gt=0)


@dataclass
class Stock:
    """What the inventory holds and what it has reserved, by key."""

    levels: dict[str, int]
    reserved: dict[str, Reservation] = field(default_factory=dict[str, Reservation])
    requests: int = 0
    arrivals: list[float] = field(default_factory=list[float])
    """When each reservation request arrived, on the faults' clock."""
    reads: int = 0
    """Requests for a stock level (``GET /stock/{sku}``), counted apart."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def create_inventory(stock: Stock, faults: Faults) -> FastAPI:
    """The inventory service over `stock`, failing as `faults` says."""
    app = FastAPI(title="inventory")

    @app.post("/reservations")
    def reserve(
        reservation: Reservation, idempotency_key: str = Header(min_length=1)
    ) -> Reservation:
        with stock.lock:
            stock.requests += 1
            stock.arrivals.append(faults.now())
            if faults.fails():
                raise HTTPException(status_code=503, detail="try again later")
            if idempotency_key in stock.reserved:
                return stock.reserved[idempotency_key]
            left = stock.levels.get(reservation.sku, 0)
            if left < reservation.quantity:
                raise HTTPException(status_code=409, detail="not enough stock")
            stock.levels[reservation.sku] = left - reservation.quantity
            stock.reserved[idempotency_key] = reservation
            return reservation

    @app.get("/stock/{sku}")
    def level(sku: str) -> StockLevel:
        with stock.lock:
            stock.reads += 1
            if faults.fails():
                raise HTTPException(status_code=503, detail="try again later")
            available = stock.levels.get(sku)
            if available is None:
                raise HTTPException(status_code=404, detail="no such sku")
            return StockLevel(sku=sku, available=available)

    return app
