"""The pure-ASGI middlewares of `mediator.asgi`: one module per middleware."""
