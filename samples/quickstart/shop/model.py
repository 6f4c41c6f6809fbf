"""The shop's data: orders and their lines, as frozen pydantic models."""

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, PositiveInt


class OrderLine(BaseModel):
    """So many units of one product."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sku: str
    quantity: PositiveInt


class Order(BaseModel):
    """A placed order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    customer: str
    lines: tuple[OrderLine, ...]
    total: Decimal


class PricedLine(BaseModel):
    """An order line with its price, as the `OrderLines` stream yields it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sku: str
    quantity: int
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        """The price of the whole line."""
        return self.unit_price * self.quantity


class Delivery(BaseModel):
    """A delivery received from a supplier, as stored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    supplier: str
    lines: tuple[OrderLine, ...]


class SalesReport(BaseModel):
    """The sales so far."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    orders: int
    revenue: Decimal


class Stocktake(BaseModel):
    """A stock count, as stored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    sku: str
    counted: int
    value: Decimal
