"""The HTTP client demo runs as a user runs it: a script, in its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.samples import assert_prints, run_sample

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "samples" / "http_client" / "main.py"

EXPECTED = """\
The flaky inventory server is up on 127.0.0.1.
1. A GET that fails twice, then succeeds, is retried
   (the server shows each request's X-Correlation-ID in brackets)
   server: GET /items/widget -> 503 [lookup-1]
   client 'inventory': attempt 1 failed (503), retrying
   server: GET /items/widget -> 503 [lookup-1]
   client 'inventory': attempt 2 failed (503), retrying
   server: GET /items/widget -> 200 [lookup-1]
   -> 200, 12 widgets in stock
2. The stock service goes down: the breaker opens, then recovers
   server: GET /stock/gadget -> 503 [stock-check]
   call 1: 503
   server: GET /stock/gadget -> 503 [stock-check]
   call 2: 503
   server: GET /stock/gadget -> 503 [stock-check]
   call 3: 503
   server: GET /stock/gadget -> 503 [stock-check]
   client 'stock': breaker closed -> open
   call 4: 503
   call 5: BrokenCircuitError, not sent (the server has seen 4 calls)
   call 6: BrokenCircuitError, not sent (the server has seen 4 calls)
   call 7: BrokenCircuitError, not sent (the server has seen 4 calls)
   the service is back; the demo waits out the 0.3 s break
   client 'stock': breaker open -> half_open
   server: GET /stock/gadget -> 200 [stock-check]
   client 'stock': breaker half_open -> closed
   call 8, the probe: 200
   server: GET /stock/gadget -> 200 [stock-check]
   call 9: 200
3. A POST is sent once: a retry could place the order twice
   server: POST /orders -> 503 [order-1]
   -> 503, not retried
   The same POST with an Idempotency-Key is retried
   server: POST /orders -> 503 [order-2] Idempotency-Key: order-7
   client 'inventory': attempt 1 failed (503), retrying
   server: POST /orders -> 503 [order-2] Idempotency-Key: order-7
   client 'inventory': attempt 2 failed (503), retrying
   server: POST /orders -> 201 [order-2] Idempotency-Key: order-7
   -> 201 after three attempts
4. The catalog is down for everyone: the retry budget bounds the retries
   20 calls, each answered 503; the server saw 24 requests
   4 retries sent, 20 refused by the budget (0.2 per call); without it: 80 requests
5. The partner API publishes its quota: the client keeps a tenth back
   server: GET /partner/offer-1 -> 200 [offers]
   call 1: 200, 9 left
   server: GET /partner/offer-2 -> 200 [offers]
   call 2: 200, 8 left
   server: GET /partner/offer-3 -> 200 [offers]
   call 3: 200, 7 left
   server: GET /partner/offer-4 -> 200 [offers]
   call 4: 200, 6 left
   server: GET /partner/offer-5 -> 200 [offers]
   call 5: 200, 5 left
   server: GET /partner/offer-6 -> 200 [offers]
   call 6: 200, 4 left
   server: GET /partner/offer-7 -> 200 [offers]
   call 7: 200, 3 left
   server: GET /partner/offer-8 -> 200 [offers]
   call 8: 200, 2 left
   server: GET /partner/offer-9 -> 200 [offers]
   call 9: 200, 1 left
   call 10: RateLimitedError (quota), not sent; the quota resets in 60 s
   the server saw 9 requests and never answered 429
6. A @retryable command calls the catalog, which is down
   client 'pricing': attempt 1 failed (503), retrying
   client 'pricing': attempt 2 failed (503), retrying
   client 'pricing': attempt 3 failed (503), retrying
   -> 503, final: the HTTP client retried it
   the catalog saw 4 requests (4 x 4 = 16 if both layers retried)
7. A calls B with 1 s left; B calls C, which takes 3 s
   service B: its call to C ran out of its caller's deadline
   service B answers 504
   A got 504 from B, within its deadline
   B says its own call gave up (X-Retry-Exhausted): A did not retry
The server is stopped.
"""


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_the_demo_prints_every_step(where: str, tmp_path: Path) -> None:
    cwd = ROOT if where == "repository root" else tmp_path
    assert_prints(run_sample(MAIN, cwd), EXPECTED)
