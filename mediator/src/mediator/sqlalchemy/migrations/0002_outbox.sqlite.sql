-- mediator-core: the outbox's table (mediator.sqlalchemy.outbox_table), SQLite.
-- Times are UTC text of one fixed width, 'YYYY-MM-DD HH:MM:SS.ffffff', so that text
-- comparison orders them; the outbox writes and reads them that way.

CREATE TABLE mediator_outbox (
    seq INTEGER NOT NULL,
    id VARCHAR(36) NOT NULL,
    kind VARCHAR(7) NOT NULL,
    message_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    ordering_key VARCHAR(255),
    principal TEXT,
    correlation_id VARCHAR(255),
    state VARCHAR(9) NOT NULL,
    attempts INTEGER NOT NULL,
    created_at DATETIME NOT NULL,
    next_attempt_at DATETIME NOT NULL,
    lease_token VARCHAR(32),
    lease_expires_at DATETIME,
    finished_at DATETIME,
    last_error TEXT,
    PRIMARY KEY (seq),
    CONSTRAINT mediator_outbox_state CHECK (state IN ('pending', 'delivered', 'dead')),
    CONSTRAINT mediator_outbox_kind CHECK (kind IN ('send', 'publish')),
    CONSTRAINT mediator_outbox_id UNIQUE (id)
);

CREATE INDEX mediator_outbox_due ON mediator_outbox (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX mediator_outbox_ordering ON mediator_outbox (ordering_key, seq)
    WHERE state = 'pending';
CREATE INDEX mediator_outbox_finished ON mediator_outbox (state, finished_at);
