"""`DomainErrorMiddleware` for WSGI: domain errors as problem+json answers."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any, cast

from mediator._asgi.problems import (
    DEFAULT_RETRY_AFTER,
    answer_for,
    checked_retry_after,
    problem_parts,
)
from mediator._asgi.types import PRINCIPAL_SCOPE_KEY, check_challenge
from mediator._core.context import current_principal
from mediator._wsgi.types import (
    StartResponse,
    WSGIApplication,
    WSGIEnvironment,
    check_app,
    enter_stack,
    problem_response,
)

__all__ = ["DEFAULT_RETRY_AFTER", "DomainErrorMiddleware"]


class DomainErrorMiddleware:
    """Answers the domain errors the wrapped WSGI app raises with problem+json.

    The twin of `mediator.asgi.DomainErrorMiddleware`: the same mapping
    (`ValidationError` 422 with ``errors``, `NotFoundError` 404,
    `ForbiddenError` 403 or 401 without a principal, `ConflictError` 409,
    `BusinessRuleError` 422, `TransientDatabaseError` 503 with
    ``Retry-After``, `DeadlineExceededError` 504; groups by the same
    precedence), the same bodies to the
    byte, the same options. The ``detail`` is fixed for each kind: never the
    exception's message.

    Only an error raised by the app's call is answered: one raised while the
    server reads the body it returned comes after the answer began, and is
    re-raised, as is every error that does not map. An app that called
    ``start_response`` before it raised is answered through
    ``start_response`` with the error's ``exc_info``: the server replaces
    the answer it was given, or re-raises the error if it already sent it.

    The framework must let the error reach the middleware: Flask with
    ``PROPAGATE_EXCEPTIONS = True``, Django with
    ``DEBUG_PROPAGATE_EXCEPTIONS = True`` (each answers 500 itself
    otherwise). Wrap the app's WSGI callable (Flask's ``app.wsgi_app``), and
    put this middleware inside `RequestContextMiddleware`: another order
    raises `MiddlewareOrderError` on every request.

    Args:
        app: The WSGI application to wrap.
        retry_after: Seconds a 503 asks the caller to wait; default 1. Sent
            in whole seconds, rounded up.
        www_authenticate: The challenge of a 401 answer's
            ``WWW-Authenticate`` header, such as ``'Bearer realm="shop"'``;
            None (the default) sends none.

    Raises:
        TypeError: `app` is not callable, `retry_after` is not a number, or
            `www_authenticate` is not a string.
        ValueError: `retry_after` is negative, NaN, infinite or over a day,
            or `www_authenticate` is empty or holds a character a header
            value may not (a line break).

    Example:
        >>> from wsgiref.util import setup_testing_defaults
        >>> from mediator import NotFoundError
        >>> def app(environ, start_response):
        ...     raise NotFoundError("no order 42 for customer secret@example.com")
        >>> environ = {}
        >>> setup_testing_defaults(environ)
        >>> answered = []
        >>> def start_response(status, headers, exc_info=None):
        ...     answered.append(status)
        >>> body = DomainErrorMiddleware(app)(environ, start_response)
        >>> answered, b"".join(body)
        (['404 Not Found'], b'{"type": "about:blank", "title": "Not Found", ...}')
    """

    def __init__(
        self,
        app: WSGIApplication,
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        www_authenticate: str | None = None,
    ) -> None:
        check_app(app)
        self.app = app
        self.retry_after = checked_retry_after(retry_after)
        self.www_authenticate = check_challenge(www_authenticate)
        self._retry_after = str(math.ceil(retry_after)).encode("ascii")
        self._challenge = (
            None if www_authenticate is None else www_authenticate.encode("ascii")
        )

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app; answer a domain error its call raised."""
        enter_stack(environ, "DomainErrorMiddleware")
        started = False

        def watched(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], object]:
            nonlocal started
            started = True
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, cast("StartResponse", watched))
        except Exception as error:
            authenticated = (
                current_principal() is not None
                or environ.get(PRINCIPAL_SCOPE_KEY) is not None
            )
            found = answer_for(error, authenticated)
            if found is None:
                raise
            answer, errors = found
            members, extra = problem_parts(
                answer, errors, retry_after=self._retry_after, challenge=self._challenge
            )
            status, headers, body = problem_response(
                answer.status,
                answer.title,
                answer.detail,
                members=members,
                headers=extra,
            )
            # An answer begun is replaced through exc_info, or the server
            # re-raises the error when it already sent that answer.
            start_response(status, headers, sys.exc_info() if started else None)
            return [body]
