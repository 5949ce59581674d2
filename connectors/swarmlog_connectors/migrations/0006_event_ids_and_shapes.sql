-- What the mirror keeps of repeated event ids and of rolling schema upgrades (issue 28).
--
-- 1. An event id names one event of its topic's log. A second message with an id already mirrored
--    (re-sent by a producer or a copy tool) is not a second event: the sink dead-letters it, naming
--    the first, and this unique index is how Postgres says so for every writer of the mirror. Rows a
--    mirror already holds twice move to dead_letters first: the later ones, by offset. Their bytes
--    stay in the topic at their offsets (`raw` is NULL: the mirror never had them).
-- 2. read_version: the schema version a row's payload was read into, the newest its sink knew. A
--    reader upgraded later reads an older event into a newer shape (a new field's default), so
--    `swarmlog mirror verify` compares each row with the shape it was written in. NULL for rows
--    mirrored before this version: verify accepts any shape from the writer's version up.

INSERT INTO dead_letters (topic, seq, error, raw, key, header_keys, header_values)
SELECT e.topic, e.seq,
       format('duplicate event id %L: a second copy of the event at offset %s (moved out of events by migration '
              '0006; its bytes are in the topic at this offset)', e.event_id, f.first_seq),
       NULL, NULL, '{}', '{}'
  FROM events e
  JOIN (SELECT topic, event_id, min(seq) AS first_seq FROM events GROUP BY topic, event_id HAVING count(*) > 1) f
    ON e.topic = f.topic AND e.event_id = f.event_id AND e.seq > f.first_seq
ON CONFLICT DO NOTHING;

DELETE FROM events e
 USING (SELECT topic, event_id, min(seq) AS first_seq FROM events GROUP BY topic, event_id HAVING count(*) > 1) f
 WHERE e.topic = f.topic AND e.event_id = f.event_id AND e.seq > f.first_seq;

CREATE UNIQUE INDEX IF NOT EXISTS events_by_event_id ON events (topic, event_id);

ALTER TABLE events ADD COLUMN IF NOT EXISTS read_version integer;
