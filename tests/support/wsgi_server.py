"""A WSGI app under waitress on 127.0.0.1, in a thread, for the WSGI tests.

waitress is pure Python: it serves from a thread of the test process and
stops on request, so a test reads what the app saw in the same process.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

# waitress ships no types: used through `Any`.
waitress: Any = importlib.import_module("waitress")

HOST = "127.0.0.1"
JOIN_TIMEOUT = 30.0  # seconds; generous on a busy 2-core machine


@contextmanager
def serve_wsgi(app: Any, *, name: str = "wsgi server") -> Generator[str]:
    """Serve `app` on 127.0.0.1 (a free port) in a thread; yield its base URL.

    On exit the server's worker threads finish and are joined, then its
    loop closes every socket it holds and its thread is joined.

    Raises:
        RuntimeError: The server's thread outlived the stop.
    """
    # The loop's own map: the stop closes everything in it, from the loop's
    # thread (closing sockets from another thread races the loop's poll).
    dispatchers: dict[int, Any] = {}
    server = waitress.create_server(
        app,
        map=dispatchers,
        host=HOST,
        port=0,
        threads=4,
        ident=name,
        clear_untrusted_proxy_headers=True,
    )
    port = server.effective_port
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()

    def stop() -> None:
        for dispatcher in list(dispatchers.values()):
            dispatcher.close()
        dispatchers.clear()

    try:
        yield f"http://{HOST}:{port}"
    finally:
        # The workers finish their tasks first: each pulls the loop's trigger
        # when it is done, which must still be open then.
        server.task_dispatcher.shutdown()
        server.trigger.pull_trigger(stop)
        thread.join(JOIN_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError(f"{name} did not stop within {JOIN_TIMEOUT} s")
