"""`ScriptedTransport`: an `httpx.MockTransport` that answers from a list."""

from __future__ import annotations

from typing import TypeAlias

import httpx

__all__ = ["ScriptedAnswer", "ScriptedTransport"]

ScriptedAnswer: TypeAlias = "int | httpx.Response | Exception"
"""One answer of a `ScriptedTransport`: a status, a response, or an exception."""


class ScriptedTransport(httpx.MockTransport):
    """A fake server for tests: answers the requests it gets from a list, in order.

    An int answers with that status and an empty body; an `httpx.Response`
    (built with its content, such as ``httpx.Response(200, json={...})``)
    answers with a fresh copy of it, so it may be answered more than once; an
    exception is raised, as a transport failure would be
    (``httpx.ConnectError("refused")``). Once the list is spent, its last
    answer repeats. Works under sync and async clients and transports.

    Args:
        answers: At least one answer.

    Attributes:
        requests: Every request received, in order.

    Raises:
        ValueError: No answer was given.
        TypeError: An answer is none of the three kinds.

    Example:
        >>> transport = ScriptedTransport(503, 200)
        >>> with httpx.Client(transport=transport) as client:
        ...     [client.get("http://api.example/").status_code for _ in range(3)]
        [503, 200, 200]
        >>> transport.hits
        3
    """

    def __init__(self, *answers: ScriptedAnswer) -> None:
        if not answers:
            raise ValueError("a ScriptedTransport needs at least one answer")
        for answer in answers:
            kinds = int | httpx.Response | Exception
            valid = isinstance(answer, kinds)  # pyright: ignore[reportUnnecessaryIsInstance]
            if isinstance(answer, bool) or not valid:
                raise TypeError(
                    "an answer is a status (int), an httpx.Response or an "
                    f"exception, got {type(answer).__name__}"
                )
        self.answers: tuple[ScriptedAnswer, ...] = answers
        self.requests: list[httpx.Request] = []
        super().__init__(self._answer)

    @property
    def hits(self) -> int:
        """How many requests arrived."""
        return len(self.requests)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, int):
            return httpx.Response(answer)
        return httpx.Response(
            answer.status_code,
            headers=answer.headers,
            content=answer.content,
            extensions=dict(answer.extensions),
        )

    def __repr__(self) -> str:
        return f"ScriptedTransport(answers={len(self.answers)}, hits={self.hits})"
