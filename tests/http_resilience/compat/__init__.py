"""httpx compatibility: each behaviour run on plain httpx and on our clients.

The oracle is plain httpx: every test runs one scenario with a plain
`httpx.Client` / `httpx.AsyncClient` and with the resilient clients
(`create_client` / `create_async_client`, and a plain client around a
`ResilientTransport`), and asserts the same observable result. What differs on
purpose is pinned in `test_differences.py` and explained in
docs/httpx-compat.md.
"""
