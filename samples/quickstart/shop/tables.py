"""The deliveries' and stocktakes' tables in SQLite, mapped with SQLAlchemy.

`main.py` creates them with ``Base.metadata.create_all``; handlers write them
through the request's `Session`, and the unit of work commits.
"""

from sqlalchemy import ForeignKey
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class DeliveryRow(Base):
    """A delivery from a supplier."""

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    supplier: Mapped[str]
    lines: Mapped[list["DeliveryLineRow"]] = relationship(order_by="DeliveryLineRow.id")


class DeliveryLineRow(Base):
    """So many units of one product, in a delivery."""

    __tablename__ = "delivery_lines"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("deliveries.id"))
    sku: Mapped[str]
    quantity: Mapped[int]


class StocktakeRow(Base):
    """A stock count of one product, valued at the market price."""

    __tablename__ = "stocktakes"

    id: Mapped[int] = mapped_column(primary_key=True)
    sku: Mapped[str]
    counted: Mapped[int]
    # Money in cents: SQLite has no decimal type.
    value_cents: Mapped[int] = mapped_column(default=0)
