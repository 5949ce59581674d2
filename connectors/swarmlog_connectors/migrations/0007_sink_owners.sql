-- Which sink of a group mirrors each topic (issue 28): sinks of one pattern share its topics
-- through a Kafka consumer group, and the sink the group gives a topic claims its row here
-- before reading it. A sink writes a topic's rows only while the row names it, so a sink that
-- lost the topic can never commit it again once another has claimed it
-- (swarmlog_connectors.sink_owners). NULL: no sink holds the topic (released, or never
-- claimed: the one-topic sink does not claim).
--
--   SELECT owner, count(*), sum(next_offset) FROM sink_positions GROUP BY owner;

ALTER TABLE sink_positions
    ADD COLUMN IF NOT EXISTS owner      text,
    ADD COLUMN IF NOT EXISTS claimed_at timestamptz;
