"""Handlers that use the database: a transactional command and a query.

Both take the request's SQLAlchemy `Session`, which `SqlAlchemyModule` provides.
Neither commits: for the `@transactional` command, the unit of work does.
"""

from injector import inject
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from mediator import CommandHandler, QueryHandler
from shop.commands import ReceiveDelivery
from shop.model import Delivery, OrderLine
from shop.queries import GetDeliveries
from shop.services import Catalog
from shop.tables import DeliveryLineRow, DeliveryRow


class ReceiveDeliveryHandler(CommandHandler[ReceiveDelivery, int]):
    @inject
    def __init__(self, session: Session, catalog: Catalog) -> None:
        self.session = session
        self.catalog = catalog

    def handle(self, request: ReceiveDelivery) -> int:
        delivery = DeliveryRow(
            supplier=request.supplier,
            lines=[
                DeliveryLineRow(sku=line.sku, quantity=line.quantity)
                for line in request.lines
            ],
        )
        self.session.add(delivery)
        self.session.flush()  # written, inside the transaction
        print(
            f"   wrote delivery {delivery.id} with {len(request.lines)} line(s), "
            "not committed yet"
        )
        # Checked after writing, to show a failure undoing writes: a product
        # the shop does not sell raises NotFoundError, and the unit of work
        # rolls the delivery back.
        for line in request.lines:
            self.catalog.price(line.sku)
        return delivery.id


class GetDeliveriesHandler(QueryHandler[GetDeliveries, tuple[Delivery, ...]]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: GetDeliveries) -> tuple[Delivery, ...]:
        rows = self.session.scalars(
            select(DeliveryRow)
            .options(selectinload(DeliveryRow.lines))
            .order_by(DeliveryRow.id)
        )
        return tuple(
            Delivery(
                id=row.id,
                supplier=row.supplier,
                lines=tuple(
                    OrderLine(sku=line.sku, quantity=line.quantity)
                    for line in row.lines
                ),
            )
            for row in rows
        )
