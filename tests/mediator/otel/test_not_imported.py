"""Nothing of OpenTelemetry is imported until `mediator.otel` is."""

from __future__ import annotations

import json
import subprocess
import sys

PROGRAM = """
import json, sys
import mediator
before = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
import mediator.otel
after = any(m.split(".")[0] == "opentelemetry" for m in sys.modules)
leaked = sorted(
    m for m in ("http_resilience", "mediator_resilience", "httpx") if m in sys.modules
)
print(json.dumps([before, after, leaked]))
"""


def test_importing_the_package_imports_no_opentelemetry() -> None:
    output = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    before, after, leaked = json.loads(output)
    assert before == []
    assert after is True
    assert leaked == []
