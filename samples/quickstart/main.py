"""The quickstart: a command, a query, a notification and a stream through the mediator.

Run it with ``make demo`` (or ``python samples/quickstart/main.py``). Python puts
this file's directory first on ``sys.path``, so the ``shop`` package next to it
imports from wherever you start it.
"""

import asyncio
import logging
import sys

from injector import Injector

import shop
from mediator import DomainError, Mediator, MediatorModule
from shop.behaviors import LoggingBehavior
from shop.commands import PlaceOrder
from shop.model import OrderLine
from shop.notifications import OrderPlaced
from shop.queries import GetOrder, OrderLines


def build_mediator() -> Mediator:
    """Register every handler in `shop`, add one behavior, and build the mediator.

    Building it checks every handler and behavior: a duplicate handler or a
    dependency injector cannot build fails here, not at the first send.
    """
    injector = Injector(
        [
            MediatorModule(
                lambda m: (
                    m.register_from(shop).add_behavior(LoggingBehavior).use_defaults()
                )
            )
        ]
    )
    return injector.get(Mediator)


async def main() -> None:
    mediator = build_mediator()

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


if __name__ == "__main__":
    logging.basicConfig(format="   [log] %(message)s", stream=sys.stdout)
    logging.getLogger("shop").setLevel(logging.INFO)
    asyncio.run(main())
