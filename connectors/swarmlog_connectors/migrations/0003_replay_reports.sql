-- The table swarm replays publish their reports into (swarmlog_connectors.replay_reports).
-- IF NOT EXISTS: the replay publisher created it itself before versioned migrations.

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
