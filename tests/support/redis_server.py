"""A throwaway ``redis-server`` for the test suite, one per test session.

It listens on 127.0.0.1 only, on a free port, with persistence off (no RDB
snapshot, no append-only file), in a temporary directory that is removed at the
end of the session. Without the binary the tests skip, except under CI, where
they fail (`tests.support.missing`). A test can `kill` the server and `start`
it again on the same port, to prove what happens while Redis is away; the
fixture `redis_server` flushes the keyspace and makes sure it runs before each
test that asks for it.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from tests.support.missing import missing

if TYPE_CHECKING:
    import redis

__all__ = ["RedisServer", "redis_server", "redis_session"]

_START_TIMEOUT = 10.0


def unavailable(reason: str) -> NoReturn:
    """Skip the test; under CI fail it, since a skip would pass a broken set-up off."""
    missing(reason, remedy=".ci/run should have installed the `redis-server` package")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process: its URL, and a way to kill and restart it.

    Args:
        binary: The ``redis-server`` executable.
        directory: Its working directory (the log goes there).
    """

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers."""
        if self.running:
            return
        log = (self.directory / "server.log").open("ab")
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
        ]
        self._process = subprocess.Popen(command, stdout=log, stderr=log)
        log.close()
        import redis  # the extra's: imported only by the tests that use it

        client = redis.Redis.from_url(self.url, socket_timeout=1.0)  # pyright: ignore[reportUnknownMemberType]
        started = time.perf_counter()
        try:
            while True:
                try:
                    if client.ping():  # pyright: ignore[reportUnknownMemberType]
                        return
                except redis.ConnectionError:
                    pass
                if not self.running:
                    raise RuntimeError(f"redis-server exited: {self.log_tail()}")
                if time.perf_counter() - started > _START_TIMEOUT:
                    raise RuntimeError(
                        f"redis-server did not answer: {self.log_tail()}"
                    )
                # A real process is starting: wait a moment on it (it may exit).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=_START_TIMEOUT)

    def stop(self) -> None:
        """Stop the server: terminate, then kill if it lingers."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=_START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=_START_TIMEOUT)

    def client(self) -> redis.Redis:
        """A new client of the server (close it when done)."""
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=2.0)  # pyright: ignore[reportUnknownMemberType]

    def log_tail(self) -> str:
        """The end of the server's log."""
        path = self.directory / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@pytest.fixture(scope="session")
def redis_session() -> Iterator[RedisServer]:
    """The session's ``redis-server``, started on first use, removed at the end."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("`redis-server` is not on PATH")
    directory = Path(tempfile.mkdtemp(prefix="pytest-redis-"))
    server = RedisServer(binary, directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_server(redis_session: RedisServer) -> Iterator[RedisServer]:
    """The session's server, running and empty; left running for the next test."""
    redis_session.start()
    client = redis_session.client()
    try:
        client.flushall()  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()
    yield redis_session
    redis_session.start()
