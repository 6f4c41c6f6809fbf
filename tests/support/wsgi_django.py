"""The WSGI test service as a Django app: settings, url patterns and views.

Django's settings are configured once per process, when this module is first
imported; it is also the ``ROOT_URLCONF``. No database.
"""

from __future__ import annotations

import importlib
from typing import Any

from tests.support.wsgi_service import CallDown, Fail, Quote, Service, stream_of

# Django ships no types: its modules are used through `Any`.
django: Any = importlib.import_module("django")
settings: Any = importlib.import_module("django.conf").settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        # The errors reach the WSGI middlewares instead of Django's own 500.
        DEBUG_PROPAGATE_EXCEPTIONS=True,
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[],
        MIDDLEWARE=[],
        DATABASES={},
        USE_TZ=True,
        SECRET_KEY="wsgi-tests-only",
        LOGGING_CONFIG=None,
    )
    django.setup()

http: Any = importlib.import_module("django.http")
urls: Any = importlib.import_module("django.urls")
handlers: Any = importlib.import_module("django.core.handlers.wsgi")

_served: list[Service] = []


def _service() -> Service:
    return _served[-1]


def quote(request: Any) -> Any:
    return http.JsonResponse(_service().mediator.send_sync(Quote()))


def fail(request: Any, kind: str) -> Any:
    _service().mediator.send_sync(Fail(kind=kind))
    return http.HttpResponse(b"")


def down(request: Any, then: str) -> Any:
    status = _service().mediator.send_sync(CallDown(then=then))
    return http.HttpResponse(b"", status=status)


def stream(request: Any) -> Any:
    return http.StreamingHttpResponse(stream_of(_service()), content_type="text/plain")


urlpatterns = [
    urls.path("quote", quote),
    urls.path("fail/<str:kind>", fail),
    urls.path("down/<str:then>", down),
    urls.path("stream", stream),
]


def django_app(service: Service) -> Any:
    """Django's WSGI handler, its views sending through `service`."""
    _served.append(service)
    return handlers.WSGIHandler()
