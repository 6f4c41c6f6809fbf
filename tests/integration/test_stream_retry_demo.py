"""The stream retry demo runs as a user runs it: a script, in its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.samples import assert_prints, run_sample

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "samples" / "stream_retry" / "main.py"

EXPECTED = """\
1. a source that fails before its first word is asked again
   attempt 1 starts at word 0
   attempt 1 breaks
   [log] a stream: attempt 1 failed with ConnectionResetError, 0 yielded so far; \
retrying in 0.005 s
   attempt 2 starts at word 0
   received: The quick brown fox jumps
2. a break after words were passed on is re-raised (RETHROW_MID_STREAM)
   attempt 1 starts at word 0
   attempt 1 breaks
   received: The quick
   re-raised: ConnectionResetError: the connection was reset
3. RESTART_FROM_START, the source resuming from items_yielded
   attempt 1 starts at word 0
   attempt 1 breaks
   [log] a stream: attempt 1 failed with ConnectionResetError, 2 yielded so far; \
retrying in 0.005 s
   attempt 2 starts at word 2
   attempt 2 breaks
   [log] a stream: attempt 2 failed with ConnectionResetError, 3 yielded so far; \
retrying in 0.010 s
   attempt 3 starts at word 3
   received: The quick brown fox jumps
4. resumable_bytes: a 1,000,000-byte download continues with Range
   GET /big.bin -> 200, then the connection drops at byte 300,000
   [log] a stream: attempt 1 failed with RemoteProtocolError, 300000 yielded so far; \
retrying in 0.005 s
   GET /big.bin with Range: bytes=300000- and If-Range: "v1" -> 206
   received 1,000,000 bytes; the file's sha256 matches: True
5. a server that ignores Range: the break is re-raised by default
   GET /big.bin -> 200, then the connection drops at byte 300,000
   [log] a stream: attempt 1 failed with RemoteProtocolError, 300000 yielded so far; \
retrying in 0.005 s
   GET /big.bin with Range: bytes=300000- and If-Range: "v1" -> 200
   received 300,000 bytes, then re-raised: peer closed connection
   why: resumable_bytes could not resume at byte 300000: the server sent the whole \
body (200) instead of the range; RESTART_FROM_START would start the body over
6. ... or, under RESTART_FROM_START, the body starts over from byte 0
   GET /big.bin -> 200, then the connection drops at byte 300,000
   [log] a stream: attempt 1 failed with RemoteProtocolError, 300000 yielded so far; \
retrying in 0.005 s
   GET /big.bin with Range: bytes=300000- and If-Range: "v1" -> 200
   received 1,300,000 bytes; the file's sha256 matches: True
"""


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_the_demo_prints_every_step(where: str, tmp_path: Path) -> None:
    cwd = ROOT if where == "repository root" else tmp_path
    assert_prints(run_sample(MAIN, cwd), EXPECTED)
