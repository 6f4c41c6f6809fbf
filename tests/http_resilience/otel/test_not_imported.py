"""Nothing of OpenTelemetry is imported until `http_resilience.otel` is."""

from __future__ import annotations

import json
import subprocess
import sys

PROGRAM = """
import json, sys
import http_resilience, http_resilience.injector, http_resilience.testing
before = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
import http_resilience.otel
after = any(m.split(".")[0] == "opentelemetry" for m in sys.modules)
print(json.dumps([before, after]))
"""


def test_importing_the_package_imports_no_opentelemetry() -> None:
    output = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    before, after = json.loads(output)
    assert before == []
    assert after is True
