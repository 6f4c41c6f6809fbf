"""The transactional outbox on SQLAlchemy: its table, recorder and relay."""
