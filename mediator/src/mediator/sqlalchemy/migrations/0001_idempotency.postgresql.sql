-- mediator-core: the idempotency store's table (mediator.sqlalchemy.idempotency_table),
-- PostgreSQL.

CREATE TABLE mediator_idempotency (
    scope VARCHAR NOT NULL,
    "key" VARCHAR(255) NOT NULL,
    fingerprint VARCHAR(64) NOT NULL,
    state VARCHAR(9) NOT NULL,
    token VARCHAR(32) NOT NULL,
    outcome_kind VARCHAR(8),
    outcome_type TEXT,
    outcome_payload TEXT,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    lease_expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
    completed_at TIMESTAMP WITH TIME ZONE,
    CONSTRAINT mediator_idempotency_pkey PRIMARY KEY (scope, "key"),
    CONSTRAINT mediator_idempotency_state CHECK (state IN ('pending', 'completed')),
    CONSTRAINT mediator_idempotency_outcome_kind
        CHECK (outcome_kind IS NULL OR outcome_kind IN ('response', 'error'))
);

CREATE INDEX mediator_idempotency_expires_at ON mediator_idempotency (expires_at);
