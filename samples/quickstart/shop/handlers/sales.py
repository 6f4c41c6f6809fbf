"""The handler of the admin-only sales report."""

from injector import inject

from mediator import QueryHandler
from shop.model import SalesReport
from shop.queries import GetSalesReport
from shop.services import SalesLedger


class GetSalesReportHandler(QueryHandler[GetSalesReport, SalesReport]):
    # Runs only for a principal with the admin role: AuthorizationBehavior,
    # installed by use_defaults(), refuses everyone else before this is built.
    @inject
    def __init__(self, ledger: SalesLedger) -> None:
        self.ledger = ledger

    def handle(self, request: GetSalesReport) -> SalesReport:
        return SalesReport(orders=self.ledger.orders, revenue=self.ledger.revenue)
