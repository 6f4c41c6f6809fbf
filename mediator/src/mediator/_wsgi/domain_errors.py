"""`DomainErrorMiddleware` for WSGI: domain errors as problem+json answers."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

from mediator._asgi.answers import (
    DEFAULT_RETRY_AFTER,
    DEGRADED_HEADER,
    DomainErrorAnswers,
    degraded_value,
)
from mediator._core.degradation import Degradation, collecting
from mediator._wsgi.types import (
    StartResponse,
    WatchedStart,
    WSGIApplication,
    WSGIEnvironment,
    enter_stack,
    problem_response,
)

__all__ = ["DEFAULT_RETRY_AFTER", "DEGRADED_HEADER", "DomainErrorMiddleware"]


class DomainErrorMiddleware(DomainErrorAnswers[WSGIApplication]):
    """Answers the domain errors the wrapped WSGI app raises with problem+json.

    The twin of `mediator.asgi.DomainErrorMiddleware`: the same mapping
    (`ValidationError` 422 with ``errors``, `NotFoundError` 404,
    `ForbiddenError` 403 or 401 without a principal, `ConflictError` 409,
    `BusinessRuleError` 422, `TransientDatabaseError` 503 with
    ``Retry-After``, `DeadlineExceededError` 504; groups by the same
    precedence), the same bodies to the
    byte, the same options. The ``detail`` is fixed for each kind: never the
    exception's message. With ``degradation_header=True``, the ``Degraded``
    header of the ASGI twin, for what degraded during the app's call (not
    while the server reads a body the app returned lazily).

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
        retry_after: As for the ASGI twin: seconds a 503 asks the caller to
            wait; default 1.
        www_authenticate: As for the ASGI twin: the challenge of a 401
            answer; None (the default) sends none.
        degradation_header: As for the ASGI twin: whether a degraded answer
            says so in a ``Degraded`` header; default False.

    Raises:
        TypeError: `app` is not callable, or an option has the wrong type
            (the ASGI twin's rules and messages).
        ValueError: An option is out of bounds (the ASGI twin's rules).

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

    _application: ClassVar[str] = "a WSGI application"

    def __call__(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app; answer a domain error its call raised."""
        enter_stack(environ, "DomainErrorMiddleware")
        if not self.degradation_header:
            return self._answer(environ, start_response, start_response)
        with collecting() as found:
            return self._answer(
                environ, start_response, _degrading(start_response, found)
            )

    def _answer(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        app_start: StartResponse,
    ) -> Iterable[bytes]:
        watched = WatchedStart(app_start)
        try:
            return self.app(environ, cast("StartResponse", watched))
        except Exception as error:
            problem = self._problem(error, environ)
            if problem is None:
                raise
            status, headers, body = problem_response(problem)
            # An answer begun is replaced through exc_info, or the server
            # re-raises the error when it already sent that answer.
            start_response(status, headers, sys.exc_info() if watched.started else None)
            return [body]


def _degrading(start_response: StartResponse, found: list[Degradation]) -> Any:
    """`start_response`, adding the ``Degraded`` header when `found` has any."""

    def start(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        value = degraded_value(found)
        if value is not None:
            headers = [*headers, (DEGRADED_HEADER, value)]
        if exc_info is None:
            return start_response(status, headers)
        return start_response(status, headers, exc_info)

    return start
