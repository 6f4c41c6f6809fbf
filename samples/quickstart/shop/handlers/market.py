"""Handlers that call the flaky `PriceFeed`: a query, and a transactional command.

Both requests are `@retryable`: `RetryBehavior` (from `mediator_resilience`)
sends them down the chain again when the feed fails, after a short wait.
"""

from decimal import Decimal

from injector import inject
from sqlalchemy import select
from sqlalchemy.orm import Session

from mediator import CommandHandler, QueryHandler
from shop.commands import RecordStocktake
from shop.model import Stocktake
from shop.queries import GetMarketPrice, GetStocktakes
from shop.services import PriceFeed
from shop.tables import StocktakeRow


class GetMarketPriceHandler(QueryHandler[GetMarketPrice, Decimal]):
    @inject
    def __init__(self, feed: PriceFeed) -> None:
        self.feed = feed

    def handle(self, request: GetMarketPrice) -> Decimal:
        return self.feed.price(request.sku)


class RecordStocktakeHandler(CommandHandler[RecordStocktake, int]):
    # Each attempt gets a new handler and a new session: the retry behavior sits
    # outside the transaction, so every attempt runs in a fresh one.
    @inject
    def __init__(self, session: Session, feed: PriceFeed) -> None:
        self.session = session
        self.feed = feed

    def handle(self, request: RecordStocktake) -> int:
        row = StocktakeRow(sku=request.sku, counted=request.counted)
        self.session.add(row)
        self.session.flush()  # written, inside this attempt's transaction
        print(
            f"   wrote stocktake {row.id} ({request.counted} x {request.sku}), "
            "not committed yet"
        )
        # Valued after writing, to show a failed attempt's write rolled back:
        # when the feed fails, the unit of work rolls the row back, and the
        # retry writes it again in a new transaction.
        value = self.feed.price(request.sku) * request.counted
        row.value_cents = int(value * 100)
        return row.id


class GetStocktakesHandler(QueryHandler[GetStocktakes, tuple[Stocktake, ...]]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: GetStocktakes) -> tuple[Stocktake, ...]:
        rows = self.session.scalars(select(StocktakeRow).order_by(StocktakeRow.id))
        return tuple(
            Stocktake(
                id=row.id,
                sku=row.sku,
                counted=row.counted,
                value=Decimal(row.value_cents).scaleb(-2),
            )
            for row in rows
        )
