-- The Postgres mirror of swarmlog topics, version 1: what the sink created itself before
-- versioned migrations, so it is safe on a database that already has these tables (IF NOT EXISTS).
-- `seq` is the Kafka offset: the event's place in its swarm's total order.
-- Offsets have gaps (transaction markers), so never expect seq+1 to exist.

CREATE TABLE IF NOT EXISTS events (
    topic          text        NOT NULL,
    seq            bigint      NOT NULL,
    event_id       text        NOT NULL,
    run_id         text        NOT NULL,
    agent_id       text        NOT NULL,
    event_type     text        NOT NULL,
    schema_version integer     NOT NULL,
    recipient      text,
    causes         bigint[]    NOT NULL,
    payload        jsonb       NOT NULL,
    -- The broker's append time as recorded in the log: for people, never for ordering.
    logged_at      timestamptz,
    PRIMARY KEY (topic, seq)
);
CREATE INDEX IF NOT EXISTS events_by_agent ON events (topic, agent_id, seq);
CREATE INDEX IF NOT EXISTS events_by_type  ON events (topic, event_type, seq);
CREATE INDEX IF NOT EXISTS events_by_run   ON events (run_id, seq);

-- Messages the sink could not mirror: kept whole, with the reason, never dropped.
CREATE TABLE IF NOT EXISTS dead_letters (
    topic      text        NOT NULL,
    seq        bigint      NOT NULL,
    error      text        NOT NULL,
    raw        bytea,
    key        bytea,
    headers    jsonb,
    PRIMARY KEY (topic, seq)
);

-- The sink's position: the next offset to mirror. Written in the same transaction
-- as the rows it accounts for, which is what makes the mirror exactly-once.
CREATE TABLE IF NOT EXISTS sink_positions (
    topic       text    PRIMARY KEY,
    next_offset bigint  NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
