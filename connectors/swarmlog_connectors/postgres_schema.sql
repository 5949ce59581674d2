-- The Postgres mirror of swarmlog topics. Safe to run again (IF NOT EXISTS).
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

-- One row per swarm replay that published its report (`swarmlog replay --swarm ... --publish`,
-- the chart's replay Job): did the code reproduce the run, and each agent's state hash.
-- `report` is the whole JSON document the replay printed (a NUL character in it, which jsonb
-- refuses, is stored as the six characters \u0000).
CREATE TABLE IF NOT EXISTS replay_reports (
    id               bigserial   PRIMARY KEY,
    topic            text        NOT NULL,
    consumer_group   text,
    swarm            text        NOT NULL,
    run_id           text,
    code_version     text,
    end_offset       bigint      NOT NULL,
    events           bigint      NOT NULL,
    stream_hash      text        NOT NULL,
    agents           jsonb       NOT NULL,
    diverged         boolean     NOT NULL,
    divergences      integer     NOT NULL,
    first_divergence jsonb,
    report           jsonb       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS replay_reports_by_topic ON replay_reports (topic, id);

-- Replay tokens kept beside the mirror (`swarmlog token create --save`, `token list`).
-- `body` is the whole token; the other columns are what listing and finding one need.
CREATE TABLE IF NOT EXISTS replay_tokens (
    token_id     text        PRIMARY KEY,
    topic        text        NOT NULL,
    version      integer     NOT NULL,
    start_offset bigint      NOT NULL,
    end_offset   bigint      NOT NULL,
    events       bigint      NOT NULL,
    chain_hash   text        NOT NULL,
    signed       boolean     NOT NULL,
    saved_at     timestamptz NOT NULL DEFAULT now(),
    body         jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS replay_tokens_by_topic ON replay_tokens (topic, end_offset);
