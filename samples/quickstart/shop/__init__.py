"""A tiny shop: the features the quickstart registers with ``register_from(shop)``.

Requests and notifications live in `commands`, `queries` and `notifications`,
their handlers in the `handlers` subpackage, which `register_from` searches too.
Orders are kept in memory (`services`); deliveries and stocktakes in SQLite
(`tables`). Market prices come from `services.PriceFeed`, which fails two
calls out of three, for the requests marked `@retryable`.
"""
