"""The WSGI middlewares of `mediator.wsgi`: one module per middleware."""
