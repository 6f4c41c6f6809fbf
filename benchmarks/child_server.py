"""A loopback uvicorn server in a child process, for the benchmarks that need one.

The benchmark script runs itself again with a flag (`SERVE_FLAG`); the child
calls `serve` with its app, prints its port and serves until its parent closes
its stdin, it is sent SIGTERM, or `lifetime` seconds pass. The parent holds it
with `child_server`, which yields the base URL and stops it. A child process,
not a thread: the server's event loop never competes with the client's for
the parent's interpreter.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

SERVE_FLAG = "--serve"


def serve(app: Any, *, lifetime: float, backlog: int = 128) -> None:
    """Serve `app` on a free loopback port until told to stop; print the port."""
    # IPPROTO_TCP, so asyncio sets TCP_NODELAY on the accepted sockets: without
    # it every small answer waits for the peer's delayed ACK (about 40 ms).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    config = uvicorn.Config(
        app,
        http="h11",
        ws="none",
        lifespan="off",
        loop="asyncio",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=int(lifetime),
        backlog=backlog,
    )
    server = uvicorn.Server(config)

    def stop() -> None:
        server.should_exit = True

    def stop_when_the_parent_goes() -> None:
        sys.stdin.read()
        stop()

    threading.Thread(target=stop_when_the_parent_goes, daemon=True).start()
    deadline = threading.Timer(lifetime, stop)
    deadline.daemon = True
    deadline.start()
    print(listener.getsockname()[1], flush=True)
    server.run(sockets=[listener])


@contextlib.contextmanager
def child_server(script: str) -> Iterator[str]:
    """Run `script` with `SERVE_FLAG` in a child; yield its base URL; stop it."""
    child = subprocess.Popen(
        [sys.executable, script, SERVE_FLAG],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        port = child.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the bench server did not start (printed {port!r})")
        yield f"http://127.0.0.1:{port}"
    finally:
        child.stdin.close()
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
        child.stdout.close()
