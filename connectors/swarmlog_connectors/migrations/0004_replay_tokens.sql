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
