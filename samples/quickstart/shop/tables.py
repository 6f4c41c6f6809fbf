"""The deliveries' tables in SQLite, mapped with SQLAlchemy.

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
