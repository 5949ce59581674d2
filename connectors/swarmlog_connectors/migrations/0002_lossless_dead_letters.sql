-- Dead letters keep a message's headers whole: in order, duplicate keys and all, values as
-- the bytes they are (NUL, non-UTF-8) and NULL for a header without a value. Two arrays of
-- bytea, one element per header: nothing Postgres could refuse (jsonb refuses \u0000 and
-- a JSON object keeps one value per key, which is how version 1 lost both).
--
-- Read them with
--   SELECT seq, h.n, convert_from(h.k, 'UTF8') AS key, h.v AS value
--   FROM dead_letters, unnest(header_keys, header_values) WITH ORDINALITY AS h(k, v, n);

ALTER TABLE dead_letters
    ADD COLUMN header_keys   bytea[] NOT NULL DEFAULT '{}',
    ADD COLUMN header_values bytea[] NOT NULL DEFAULT '{}';

-- Version 1's rows: what survived of their headers, converted (their duplicates and
-- replaced bytes are gone for good).
UPDATE dead_letters d
SET header_keys   = h.keys,
    header_values = h.vals
FROM (
    SELECT topic, seq,
           array_agg(convert_to(e.key, 'UTF8') ORDER BY e.key)                        AS keys,
           array_agg(CASE WHEN jsonb_typeof(e.value) = 'null' THEN NULL
                          ELSE convert_to(e.value #>> '{}', 'UTF8') END ORDER BY e.key) AS vals
    FROM dead_letters, jsonb_each(headers) AS e
    WHERE jsonb_typeof(headers) = 'object'
    GROUP BY topic, seq
) h
WHERE d.topic = h.topic AND d.seq = h.seq;

ALTER TABLE dead_letters DROP COLUMN headers;
