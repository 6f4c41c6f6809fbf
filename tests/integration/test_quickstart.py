"""The quickstart runs as a user runs it: a script, in its own process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.samples import assert_prints, run_sample

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "samples" / "quickstart" / "main.py"

EXPECTED = """\
1. send a command: PlaceOrder
   [log] PlaceOrder: start
   unit of work 1 committed: reserve 3 x apple, reserve 2 x pear, save order 1
   [log] PlaceOrder: done
   placed order 1
2. send a query: GetOrder
   [log] GetOrder: start
   [log] GetOrder: done
   order 1 for alice: 3 x apple, 2 x pear, total 3.10
3. publish a notification: OrderPlaced
   [log] OrderPlaced: start
   email to alice: your order 1 is confirmed
   sales ledger: 1 order(s), 3.10 in revenue
   [log] OrderPlaced: done
4. stream: OrderLines
   3 x apple at 0.70 = 2.10
   2 x pear at 0.50 = 1.00
5. a domain error: PlaceOrder for more plums than there are
   [log] PlaceOrder: start
   [log] PlaceOrder: failed with BusinessRuleError
   refused (BusinessRuleError): only 0 x plum in stock, 1 ordered
6. a @transactional command writing to SQLite: ReceiveDelivery
   [log] ReceiveDelivery: start
   wrote delivery 1 with 2 line(s), not committed yet
   [log] ReceiveDelivery: done
   [log] GetDeliveries: start
   [log] GetDeliveries: done
   committed: delivery 1 from Orchard Ltd: 12 x apple, 6 x pear
7. ReceiveDelivery failing after it wrote: the write is rolled back
   [log] ReceiveDelivery: start
   wrote delivery 2 with 2 line(s), not committed yet
   [log] ReceiveDelivery: failed with NotFoundError
   refused (NotFoundError): no product 'durian'
   [log] GetDeliveries: start
   [log] GetDeliveries: done
   deliveries in the database: 1
   delivery 1 from Orchard Ltd: 12 x apple, 6 x pear
8. an admin-only query: GetSalesReport
   [log] GetSalesReport: start
   [log] GetSalesReport: failed with ForbiddenError
   bob is refused (ForbiddenError): GetSalesReport refused: requires one of the \
roles ['admin']
   [log] GetSalesReport: start
   [log] GetSalesReport: done
   carol, an admin, reads: 1 order(s), 3.10 in revenue
9. a @retryable query, the price feed failing twice: GetMarketPrice
   [log] GetMarketPrice: start
   [log] GetMarketPrice: attempt 1 failed with ConnectionError; retrying in 0.010 s
   [log] GetMarketPrice: attempt 2 failed with ConnectionError; retrying in 0.020 s
   [log] GetMarketPrice: done
   market price of apple: 0.55
10. a @retryable @transactional command: RecordStocktake
   [log] RecordStocktake: start
   wrote stocktake 1 (12 x apple), not committed yet
   [log] RecordStocktake: attempt 1 failed with ConnectionError; retrying in 0.010 s
   wrote stocktake 1 (12 x apple), not committed yet
   [log] RecordStocktake: attempt 2 failed with ConnectionError; retrying in 0.020 s
   wrote stocktake 1 (12 x apple), not committed yet
   [log] RecordStocktake: done
   recorded stocktake 1
   [log] GetStocktakes: start
   [log] GetStocktakes: done
   stocktakes in the database: 1
   stocktake 1: 12 x apple, worth 6.60
"""


def run_quickstart(
    cwd: Path, temporary: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_sample(MAIN, cwd, temporary)


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_quickstart_prints_every_step(where: str, tmp_path: Path) -> None:
    cwd = ROOT if where == "repository root" else tmp_path
    assert_prints(run_quickstart(cwd), EXPECTED)


def test_quickstart_removes_its_database(tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run_quickstart(tmp_path, temporary)
    assert result.returncode == 0, result.stderr
    assert list(temporary.iterdir()) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tmp"]
