"""Health and operator control: what a client's breakers, limiter and budget say."""
