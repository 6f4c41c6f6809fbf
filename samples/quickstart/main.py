"""The quickstart: a command, a query, a notification and a stream through the mediator.

Then a transaction in SQLite, committed and rolled back, a request that only an
admin may send, and two `@retryable` requests recovering from a flaky service.
Run it with ``make demo`` (or ``python
samples/quickstart/main.py``). Python puts this file's directory first on
``sys.path``, so the ``shop`` package next to it imports from wherever you
start it. The SQLite database is a temporary file, removed at the end.
"""

import asyncio
import logging
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from injector import Injector
from sqlalchemy import Engine, create_engine

import shop
from mediator import (
    DomainError,
    ForbiddenError,
    Mediator,
    MediatorModule,
    Principal,
    acting_as,
)
from mediator.sqlalchemy import SqlAlchemyModule
from mediator_resilience import ResilienceMediatorModule, ResilienceMediatorOptions
from shop.behaviors import LoggingBehavior
from shop.commands import PlaceOrder, ReceiveDelivery, RecordStocktake
from shop.model import Delivery, OrderLine
from shop.notifications import OrderPlaced
from shop.queries import (
    GetDeliveries,
    GetMarketPrice,
    GetOrder,
    GetSalesReport,
    GetStocktakes,
    OrderLines,
)
from shop.tables import Base

# Retry waits 10 ms, then 20 ms, without jitter, so that the demo is quick and
# prints the same every time. The defaults: 200 ms, doubling, with jitter.
RETRY = ResilienceMediatorOptions(
    base_delay=timedelta(milliseconds=10), use_jitter=False
)


def build_mediator(engine: Engine) -> Mediator:
    """Register every handler in `shop`, add one behavior, and build the mediator.

    `use_defaults()` installs the built-in behaviors (audit, validation,
    authorization, transaction) and orders the chain by stage; `SqlAlchemyModule`
    gives handlers a `Session` on `engine` and makes `@transactional` real;
    `ResilienceMediatorModule` adds retry, between authorization and the
    transaction, for the requests marked `@retryable`.
    Building the mediator checks every handler and behavior: a duplicate handler
    or a dependency injector cannot build fails here, not at the first send.
    """
    injector = Injector(
        [
            MediatorModule(
                lambda m: (
                    m.register_from(shop).add_behavior(LoggingBehavior).use_defaults()
                )
            ),
            SqlAlchemyModule(engine=engine),
            ResilienceMediatorModule(RETRY),
        ]
    )
    return injector.get(Mediator)


def describe(delivery: Delivery) -> str:
    """One line for a delivery: its number, supplier and lines."""
    items = ", ".join(f"{line.quantity} x {line.sku}" for line in delivery.lines)
    return f"delivery {delivery.id} from {delivery.supplier}: {items}"


async def main(mediator: Mediator) -> None:

    print("1. send a command: PlaceOrder")
    order_id = await mediator.send(
        PlaceOrder(
            customer="alice",
            lines=(
                OrderLine(sku="apple", quantity=3),
                OrderLine(sku="pear", quantity=2),
            ),
        )
    )
    print(f"   placed order {order_id}")

    print("2. send a query: GetOrder")
    order = await mediator.send(GetOrder(order_id=order_id))
    items = ", ".join(f"{line.quantity} x {line.sku}" for line in order.lines)
    print(f"   order {order.id} for {order.customer}: {items}, total {order.total}")

    # An application usually publishes from the command's handler (it can
    # inject Mediator); here each step shows one call.
    print("3. publish a notification: OrderPlaced")
    await mediator.publish(
        OrderPlaced(order_id=order.id, customer=order.customer, total=order.total)
    )

    print("4. stream: OrderLines")
    async for line in mediator.stream(OrderLines(order_id=order_id)):
        print(f"   {line.quantity} x {line.sku} at {line.unit_price} = {line.amount}")

    print("5. a domain error: PlaceOrder for more plums than there are")
    try:
        await mediator.send(
            PlaceOrder(customer="bob", lines=(OrderLine(sku="plum", quantity=1),))
        )
    except DomainError as error:
        print(f"   refused ({type(error).__name__}): {error}")

    print("6. a @transactional command writing to SQLite: ReceiveDelivery")
    await mediator.send(
        ReceiveDelivery(
            supplier="Orchard Ltd",
            lines=(
                OrderLine(sku="apple", quantity=12),
                OrderLine(sku="pear", quantity=6),
            ),
        )
    )
    for delivery in await mediator.send(GetDeliveries()):
        print(f"   committed: {describe(delivery)}")

    print("7. ReceiveDelivery failing after it wrote: the write is rolled back")
    try:
        await mediator.send(
            ReceiveDelivery(
                supplier="Tropical Imports",
                lines=(
                    OrderLine(sku="plum", quantity=4),
                    OrderLine(sku="durian", quantity=1),
                ),
            )
        )
    except DomainError as error:
        print(f"   refused ({type(error).__name__}): {error}")
    deliveries = await mediator.send(GetDeliveries())
    print(f"   deliveries in the database: {len(deliveries)}")
    for delivery in deliveries:
        print(f"   {describe(delivery)}")

    print("8. an admin-only query: GetSalesReport")
    # A web host would set the principal once per inbound request, in middleware.
    with acting_as(Principal("bob", roles=frozenset({"customer"}))):
        try:
            await mediator.send(GetSalesReport())
        except ForbiddenError as error:
            print(f"   bob is refused ({type(error).__name__}): {error}")
    with acting_as(Principal("carol", roles=frozenset({"admin"}))):
        report = await mediator.send(GetSalesReport())
        print(
            f"   carol, an admin, reads: {report.orders} order(s), "
            f"{report.revenue} in revenue"
        )

    # Each retry is logged as a warning by mediator_resilience: the request
    # type, the attempt that failed and why, never the request's fields.
    print("9. a @retryable query, the price feed failing twice: GetMarketPrice")
    price = await mediator.send(GetMarketPrice(sku="apple"))
    print(f"   market price of apple: {price}")

    # Its failed attempts wrote a row each, and each was rolled back.
    print("10. a @retryable @transactional command: RecordStocktake")
    stocktake_id = await mediator.send(RecordStocktake(sku="apple", counted=12))
    print(f"   recorded stocktake {stocktake_id}")
    stocktakes = await mediator.send(GetStocktakes())
    print(f"   stocktakes in the database: {len(stocktakes)}")
    for stocktake in stocktakes:
        print(
            f"   stocktake {stocktake.id}: {stocktake.counted} x {stocktake.sku}, "
            f"worth {stocktake.value}"
        )


def run() -> None:
    """Run the steps against a SQLite database in a temporary file."""
    with tempfile.TemporaryDirectory() as directory:
        engine = create_engine(f"sqlite:///{Path(directory) / 'shop.db'}")
        try:
            # Built before the tables are: SqlAlchemyModule prepares the engine
            # (WAL, foreign keys, a unit of work's BEGIN IMMEDIATE at its first
            # write) for the connections made after.
            mediator = build_mediator(engine)
            Base.metadata.create_all(engine)
            asyncio.run(main(mediator))
        finally:
            engine.dispose()


if __name__ == "__main__":
    logging.basicConfig(format="   [log] %(message)s", stream=sys.stdout)
    logging.getLogger("shop").setLevel(logging.INFO)
    run()
