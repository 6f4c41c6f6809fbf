"""A behavior: code around every send and publish."""

import logging
from typing import TypeVar

from mediator import Next, Stage

R = TypeVar("R")

logger = logging.getLogger(__name__)

# A custom stage, further out than every built-in one (AUDIT is 100).
LOGGING = Stage(50, "LOGGING")


class LoggingBehavior:
    """Logs each message on its way in and its outcome on its way out."""

    stage = LOGGING

    async def handle(self, request: object, next: Next[R]) -> R:
        name = type(request).__name__
        logger.info("%s: start", name)
        try:
            response = await next()
        except Exception as error:
            logger.info("%s: failed with %s", name, type(error).__name__)
            raise
        logger.info("%s: done", name)
        return response
