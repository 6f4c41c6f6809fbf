"""What a resumable download knows and decides, apart from its I/O.

`resumable.py` sends the requests and reads the bodies (its sync twin,
`resumable_sync.py`, is generated from it by tools/unasync.py); `Download`
decides what each attempt asks for and whether its answer can be stitched on.
"""

from __future__ import annotations

import re
from typing import Final

import httpx

from http_resilience._core.hosts import host_key
from http_resilience._streams.decision import StreamRetryDecision
from http_resilience._streams.options import PartialStreamPolicy, StreamRetryOptions
from http_resilience._streams.retry_support import check_options

__all__ = ["Download", "build_request", "check_client", "download_and_decision"]

# ASCII digits, at most 18 of them (an exabyte): `int` refuses a string of
# more than 4,300 digits, and a non-ASCII digit is no number in HTTP.
_LENGTH: Final = r"[0-9]{1,18}"
_CONTENT_RANGE: Final = re.compile(
    rf"bytes\s+({_LENGTH})-({_LENGTH})/({_LENGTH}|\*)", re.IGNORECASE | re.ASCII
)
_CONTENT_LENGTH: Final = re.compile(_LENGTH)
_SENDABLE: Final = re.compile(r"[\x20-\x7e]+")
_OK: Final = 200
_PARTIAL_CONTENT: Final = 206
_RANGE_NOT_SATISFIABLE: Final = 416


class Download:
    """What one download knows across its attempts; decides, does no I/O.

    `base` is how many bytes the consumer had received when the body now being
    read started: 0, or more after a restart under `RESTART_FROM_START`. The
    offset asked for is `items_yielded - base`.
    """

    __slots__ = (
        "base",
        "last_failure",
        "length",
        "refused",
        "request",
        "restart",
        "validator",
    )

    def __init__(self, request: httpx.Request, *, restart: bool) -> None:
        self.request = request
        self.restart = restart
        self.base = 0
        self.validator: str | None = None
        self.length: int | None = None
        self.last_failure: Exception | None = None
        self.refused: BaseException | None = None

    def should_retry(self, failure: Exception) -> bool:
        """False for the failure re-raised because the body could not be resumed."""
        return failure is not self.refused

    def prepare(self, items_yielded: int) -> httpx.Request | None:
        """The request for this attempt; None when every byte is already out.

        Raises:
            Exception: The last break, when resuming is impossible and the
                policy is `RETHROW_MID_STREAM`.
        """
        offset = items_yielded - self.base
        if offset == 0:
            return self.request
        if self.length is not None and offset >= self.length:
            return None
        if self.validator is None:
            return self._cannot_stitch(
                items_yielded, "the first response had no strong ETag or Last-Modified"
            )
        headers = self.request.headers.copy()
        headers["Range"] = f"bytes={offset}-"
        headers["If-Range"] = self.validator
        return httpx.Request(
            self.request.method,
            self.request.url,
            headers=headers,
            extensions=self.request.extensions,
        )

    def accept(self, response: httpx.Response, items_yielded: int) -> bool:
        """Whether to pass `response`'s body on; False: ask again from byte 0.

        Raises:
            httpx.HTTPStatusError: For a status that is not a success (and not
                416 on a resume); classified like any other failure.
            Exception: The last break, when the body cannot be stitched and the
                policy is `RETHROW_MID_STREAM`.
        """
        offset = items_yielded - self.base
        status = response.status_code
        if offset == 0:
            _raise_for_status(response)
            self._learn(response)
            return True
        if status == _PARTIAL_CONTENT:
            problem = self._partial_problem(response, offset)
            if problem is None:
                return True
        elif status == _OK:
            problem = "the server sent the whole body (200) instead of the range"
            if self.restart:
                self.base = items_yielded
                self._learn(response)
                return True
        elif status == _RANGE_NOT_SATISFIABLE:
            problem = "the server could not satisfy the range (416)"
        else:
            _raise_for_status(response)
            problem = f"the server answered {status} to a range request"
        self._cannot_stitch(items_yielded, problem)
        return False

    def _partial_problem(self, response: httpx.Response, offset: int) -> str | None:
        found = _CONTENT_RANGE.fullmatch(
            response.headers.get("Content-Range", "").strip()
        )
        if found is None:
            return "the 206 response had no readable Content-Range"
        start, end, total = int(found[1]), int(found[2]), found[3]
        if start != offset:
            return f"the 206 response did not start at byte {offset}"
        if self.length is not None and total != "*" and int(total) != self.length:
            return "the body's length changed"
        # A range that stops short of the end, or a body shorter than its range,
        # would end the download cleanly with bytes missing.
        if total != "*" and end != int(total) - 1:
            return "the 206 response stopped short of the end"
        length = response.headers.get("Content-Length")
        if length is not None and length != str(end - start + 1):
            return "the 206 response's Content-Length did not match its range"
        etag = response.headers.get("ETag")
        # Only an ETag is compared: a 206 need not repeat Last-Modified.
        resumed_by_etag = self.validator is not None and self.validator.startswith('"')
        if resumed_by_etag and etag is not None and etag != self.validator:
            return "the body's ETag changed"
        return None

    def _cannot_stitch(self, items_yielded: int, problem: str) -> httpx.Request:
        if not self.restart:
            # A resume always follows a failure; the fallback only keeps the type.
            failure = self.last_failure or RuntimeError(problem)
            offset = items_yielded - self.base
            failure.add_note(
                f"resumable_bytes could not resume at byte {offset}: {problem}; "
                "RESTART_FROM_START would start the body over"
            )
            self.refused = failure
            raise failure
        self.base = items_yielded
        self.validator = None
        self.length = None
        return self.request

    def _learn(self, response: httpx.Response) -> None:
        etag = response.headers.get("ETag")
        modified = response.headers.get("Last-Modified")
        # If-Range takes a strong validator only (RFC 9110, 13.1.5), and it is
        # sent back in a header of ours, which httpx writes in ASCII: any other
        # value would fail the resume (UnicodeEncodeError), so none is learned.
        if etag is not None and etag.startswith('"') and _SENDABLE.fullmatch(etag):
            self.validator = etag
        elif modified is not None and _SENDABLE.fullmatch(modified):
            self.validator = modified
        else:
            self.validator = None
        length = response.headers.get("Content-Length", "")
        self.length = int(length) if _CONTENT_LENGTH.fullmatch(length) else None


def _raise_for_status(response: httpx.Response) -> None:
    """`response.raise_for_status()`, its message naming the host, not the URL.

    httpx's own message quotes the whole URL: a password in its userinfo, or a
    token in its query, would go wherever the error is logged.
    """
    if response.is_success:
        return
    request = response.request
    raise httpx.HTTPStatusError(
        f"{request.method} {host_key(request.url)}: the server answered "
        f"{response.status_code} {response.reason_phrase}",
        request=request,
        response=response,
    )


def build_request(
    client: httpx.Client | httpx.AsyncClient, request: object, name: str
) -> httpx.Request:
    """The GET request to resume: `request` itself, or one built for a URL."""
    if isinstance(request, httpx.Request):
        built = request
    elif isinstance(request, httpx.URL | str):
        built = client.build_request(
            "GET", request, headers={"Accept-Encoding": "identity"}
        )
    else:
        raise TypeError(
            f"{name}() needs an httpx.Request, an httpx.URL or a str, "
            f"got {type(request).__name__}"
        )
    if built.method != "GET":
        raise ValueError(f"{name}() resumes GET requests only, got {built.method}")
    if "Range" in built.headers:
        raise ValueError(f"{name}() sets Range itself; the request already has one")
    return built


def check_client(client: object, kind: type[object], name: str) -> None:
    """A `TypeError` naming `name` unless `client` is a `kind`."""
    if not isinstance(client, kind):
        raise TypeError(
            f"{name}() needs an httpx.{kind.__name__}, got {type(client).__name__}"
        )


def download_and_decision(
    client: httpx.Client | httpx.AsyncClient,
    request: object,
    options: object,
    name: str,
) -> tuple[Download, StreamRetryDecision, StreamRetryOptions]:
    """The download's state and the retry decision that consults it."""
    checked = check_options(options, name)
    download = Download(
        build_request(client, request, name),
        restart=checked.partial_stream_policy is PartialStreamPolicy.RESTART_FROM_START,
    )
    user_should_retry = checked.should_retry

    def should_retry(failure: Exception) -> bool:
        return download.should_retry(failure) and user_should_retry(failure)

    # Resuming yields no byte twice, so the loop may retry mid-stream whatever
    # the policy; the user's policy decides only what an unresumable break does.
    decision = StreamRetryDecision(
        checked,
        partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START,
        should_retry=should_retry,
    )
    return download, decision, checked
