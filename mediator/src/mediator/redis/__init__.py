"""Hand outbox messages to a Redis stream, and deliver them from it (extra ``redis``).

Where you already run Redis, `mediator.sqlalchemy.OutboxRelay` need not
deliver the messages itself: given ``handoff=StreamHandoff(client, stream)``
it writes each one to a stream (``XADD``) and is done with it, and
`StreamConsumer`, in as many worker processes as you like, delivers them
through the mediator from a consumer group, under the message id as the
idempotency key, with bounded redelivery and a dead stream.

Nothing here imports SQLAlchemy: a handoff takes any `OutboxRecord`.

Example:
    >>> import redis
    >>> from mediator.redis import StreamConsumer, StreamHandoff
    >>> handoff = StreamHandoff(redis.Redis(), "orders:outbox")
    >>> handoff.stream
    'orders:outbox'
"""

from mediator.redis._consumer import StreamConsumer
from mediator.redis._entry import GarbledEntryError, OutboxRecord
from mediator.redis._handoff import StreamHandoff

__all__ = ["GarbledEntryError", "OutboxRecord", "StreamConsumer", "StreamHandoff"]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
