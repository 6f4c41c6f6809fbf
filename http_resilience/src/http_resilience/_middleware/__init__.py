"""The web middlewares, ASGI and WSGI: the caller's context inward, errors outward."""
