"""`IdempotencyKeyMiddleware`, the ``Idempotency-Key`` middleware of `mediator.asgi`.

`middleware` holds its flow; `settings` its defaults and argument checks;
`keys` the parsing of the header, the caller and the request's fingerprint;
`capture` the answer kept while it passes, and a kept answer sent again.
"""
