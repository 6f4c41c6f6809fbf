"""The SQLAlchemy idempotency stores: table, SQL, the async store and its sync twin."""
