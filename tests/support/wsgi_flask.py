"""The WSGI test service as a Flask app."""

from __future__ import annotations

from typing import Any

import flask

from tests.support.wsgi_service import CallDown, Fail, Quote, Service, stream_of


def flask_app(service: Service) -> flask.Flask:
    """The service's views; errors reach the middlewares (PROPAGATE_EXCEPTIONS)."""
    app = flask.Flask("wsgi_service")
    app.config["PROPAGATE_EXCEPTIONS"] = True

    @app.get("/quote")
    def quote() -> Any:
        return flask.jsonify(service.mediator.send_sync(Quote()))

    @app.get("/fail/<kind>")
    def fail(kind: str) -> Any:
        service.mediator.send_sync(Fail(kind=kind))
        return ""

    @app.get("/down/<then>")
    def down(then: str) -> Any:
        return "", service.mediator.send_sync(CallDown(then=then))

    @app.get("/stream")
    def stream() -> Any:
        return flask.Response(stream_of(service), mimetype="text/plain")

    return app
