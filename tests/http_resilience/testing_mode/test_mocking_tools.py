"""The mocking tools of docs/testing.md, and the plugin's warning (issue 25).

The page's three examples run here as a user's test file (pytester), the text
taken from the page itself: pytest-httpx and respx's default mocker sit under
the pipeline (a 503 then a 200: two requests, a 200), respx's ``using="httpx"``
mocker bypasses it, and the plugin's `BypassedPipelineWarning` says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.test_examples import DOCS, code_blocks

pytest_plugins = ["pytester"]

WARNING = "_http_resilience_pytest.BypassedPipelineWarning"
AS_ERROR = ["-W", f"error::{WARNING}"]
# The outer run's filters (pyproject: "error") would reach an in-process run.
AS_WARNING = ["-W", f"default::{WARNING}"]


def _mocking_examples() -> list[str]:
    """The python blocks of the page's "Mocking tools" section, in order."""
    text = (DOCS / "testing.md").read_text(encoding="utf-8")
    section = text.split("\n## Mocking tools\n", 1)[1].split("\n## ", 1)[0]
    return [block.code for block in code_blocks(section) if block.language == "python"]


EXAMPLES = _mocking_examples()


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=source)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_the_page_has_the_three_examples() -> None:
    assert len(EXAMPLES) == 3
    assert "httpx_mock" in EXAMPLES[0]
    assert "respx.mock()" in EXAMPLES[1]
    assert 'respx.mock(using="httpx")' in EXAMPLES[2]


# anyio's plugin runs an async test on each backend it finds: asyncio and trio.
BACKENDS = 2


@pytest.mark.parametrize(
    ("example", "runs"),
    [(0, 1), (1, BACKENDS)],
    ids=["pytest-httpx", "respx default mocker"],
)
def test_a_mock_under_the_pipeline_sees_the_retry(
    pytester: pytest.Pytester, example: int, runs: int
) -> None:
    # The example asserts 2 requests and a 200; no warning, even as an error.
    result = _run(pytester, EXAMPLES[example], *AS_ERROR)
    result.assert_outcomes(passed=runs, warnings=0)


def test_respx_using_httpx_bypasses_the_pipeline_and_the_plugin_warns(
    pytester: pytest.Pytester,
) -> None:
    # The example asserts 1 call and the 503: nothing was retried.
    result = _run(pytester, EXAMPLES[2], *AS_WARNING)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*test_user.py::test_respx_using_httpx_bypasses_the_pipeline*",
            "*BypassedPipelineWarning: respx's httpx mocker answered resilient "
            "HTTP clients above their pipeline: 'orders' (1 request)*",
        ]
    )
    result.stdout.fnmatch_lines(["*Use respx's default mocker*"])


def test_as_an_error_the_warning_fails_the_test(pytester: pytest.Pytester) -> None:
    result = _run(pytester, EXAMPLES[2], *AS_ERROR)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*BypassedPipelineWarning: respx's httpx mocker*"])


USER_TESTS = """
import httpx
import pytest
import respx

from http_resilience import create_async_client, create_client


def answer(status):
    return httpx.MockTransport(lambda request: httpx.Response(status))


@pytest.mark.anyio
async def test_async_client_bypassed(http_testing_mode):
    with respx.mock(using="httpx") as router:
        router.get("https://api.example/a").mock(return_value=httpx.Response(503))
        async with create_async_client("stock") as client:
            await client.get("https://api.example/a")
            await client.get("https://api.example/a")


def test_a_plain_client_has_no_pipeline_to_bypass():
    with respx.mock(using="httpx") as router:
        router.get("https://api.example/a").mock(return_value=httpx.Response(503))
        with httpx.Client() as client:
            assert client.get("https://api.example/a").status_code == 503


def test_a_pass_through_reaches_the_pipeline(http_testing_mode):
    with respx.mock(using="httpx") as router:
        router.get("https://api.example/a").pass_through()
        with create_client("stock", transport=answer(204)) as client:
            assert client.get("https://api.example/a").status_code == 204


@pytest.fixture
def bypassed_in_setup():
    with respx.mock(using="httpx") as router:
        router.get("https://api.example/a").mock(return_value=httpx.Response(200))
        with create_client("setup") as client:
            client.get("https://api.example/a")
    yield


def test_bypassed_in_a_fixture(bypassed_in_setup):
    pass


def test_a_failure_carries_the_hint(http_testing_mode):
    with respx.mock(using="httpx") as router:
        router.get("https://api.example/a").mock(
            side_effect=[httpx.Response(503), httpx.Response(200)]
        )
        with create_client("billing") as client:
            assert client.get("https://api.example/a").status_code == 200
"""


def test_what_the_plugin_warns_of(pytester: pytest.Pytester) -> None:
    result = _run(pytester, USER_TESTS, *AS_WARNING)
    result.assert_outcomes(passed=3 + BACKENDS, failed=1, warnings=2 + BACKENDS)
    result.stdout.fnmatch_lines(
        [
            "*test_user.py::test_async_client_bypassed*",
            "*above their pipeline: 'stock' (2 requests)*",
        ]
    )
    result.stdout.fnmatch_lines(["*above their pipeline: 'setup' (1 request)*"])
    # The failure's report ends with the hint, as a note.
    result.stdout.fnmatch_lines(
        [
            "*assert 503 == 200*",
            "*above their pipeline: 'billing' (1 request)*",
        ]
    )
    assert "a_plain_client" not in _warned_tests(result)
    assert "pass_through" not in _warned_tests(result)


def test_the_hint_stays_when_warnings_are_errors(pytester: pytest.Pytester) -> None:
    # The failure stands (not replaced by the warning), and carries the note.
    result = _run(pytester, USER_TESTS, *AS_ERROR, "-k", "failure")
    result.assert_outcomes(failed=1, deselected=4 + BACKENDS - 1)
    result.stdout.fnmatch_lines(
        ["*assert 503 == 200*", "*above their pipeline: 'billing' (1 request)*"]
    )


def _warned_tests(result: pytest.RunResult) -> str:
    """The warnings summary of a run: the tests that warned, and what."""
    text = "\n".join(result.outlines)
    return text.split("warnings summary", 1)[1].split("short test summary", 1)[0]


def test_the_module_reads_the_page_it_names() -> None:
    assert Path(__file__).relative_to(DOCS.parent).as_posix() in (
        (DOCS / "testing.md").read_text(encoding="utf-8")
    )
