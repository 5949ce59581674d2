-- Model calls, readable in SQL: one row per `llm.call` and per `http.exchange` with a known LLM API
-- (OpenAI chat completions and responses, Anthropic messages), with its model, tokens and latency as
-- columns. The events table keeps a call as recorded: JSON inside a JSON string (an llm.call's
-- request_json), or an HTTP body (a streamed reply as its `data:` lines). This view decodes it once,
-- so that "tokens per agent per model" is a GROUP BY:
--
--   SELECT agent_id, model, sum(input_tokens), sum(output_tokens), count(*)
--   FROM llm_calls WHERE topic = 'swarmlog.research' GROUP BY 1, 2;
--
-- A streamed reply's tokens are the usage its events carry (the largest count of each kind: the
-- counts in a stream are running totals); `response` is NULL for a stream (its body is not one
-- JSON document). `latency_ms` is what the server said it took (`openai-processing-ms`), when it
-- said so: swarmlog records no clock. swarmlog.debug.conversation reads the same calls in Python.

-- A body that is not JSON (or holds what jsonb refuses, \u0000) is NULL, never an error that
-- would fail the whole query.
CREATE OR REPLACE FUNCTION swarmlog_jsonb(body text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN body::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;

-- The largest integer a pattern's first group matches in a text (NULL: none).
CREATE OR REPLACE FUNCTION swarmlog_max_match(body text, pattern text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT max(m[1]::bigint) FROM regexp_matches(body, pattern, 'g') AS m
$$;

CREATE OR REPLACE VIEW llm_calls AS
WITH raw AS (
    SELECT topic, seq, run_id, agent_id, event_type AS source, logged_at,
           CASE WHEN event_type = 'llm.call' THEN payload->>'request_json' ELSE payload->>'request_body' END AS req_text,
           CASE WHEN event_type = 'llm.call' THEN payload->>'response_json' ELSE payload->>'response_body' END AS resp_text,
           payload->>'model' AS recorded_model,
           payload->>'method' AS method, payload->>'url' AS url,
           (payload->>'status')::int AS status, payload->>'error' AS error,
           payload->'response_headers' AS response_headers
    FROM events
    WHERE event_type = 'llm.call'
       OR (event_type = 'http.exchange' AND payload->>'method' = 'POST'
           AND split_part(payload->>'url', '?', 1) ~ '/(chat/completions|responses|messages)/?$')
), parsed AS (
    SELECT raw.*,
           swarmlog_jsonb(req_text) AS request,
           coalesce(resp_text ~ '^\s*(data|event):', false) AS streamed,
           CASE WHEN resp_text ~ '^\s*(data|event):' THEN NULL ELSE swarmlog_jsonb(resp_text) END AS response
    FROM raw
)
SELECT topic, seq, run_id, agent_id, source,
       CASE WHEN source = 'http.exchange' AND split_part(url, '?', 1) ~ '/chat/completions/?$' THEN 'openai.chat'
            WHEN source = 'http.exchange' AND split_part(url, '?', 1) ~ '/responses/?$' THEN 'openai.responses'
            WHEN source = 'http.exchange' THEN 'anthropic.messages'
            WHEN response ? 'output' OR (request ? 'input' AND NOT request ? 'messages') THEN 'openai.responses'
            WHEN response->>'type' = 'message' OR request ? 'system' THEN 'anthropic.messages'
            ELSE 'openai.chat' END AS api,
       -- the model asked for (a served version, response->>'model', may be dated: see `response`)
       coalesce(nullif(recorded_model, ''), request->>'model', response->>'model',
                substring(resp_text from '"model"\s*:\s*"([^"]+)"')) AS model,
       method, url, status, streamed,
       coalesce((response->'usage'->>'prompt_tokens')::bigint, (response->'usage'->>'input_tokens')::bigint,
                CASE WHEN streamed THEN swarmlog_max_match(resp_text, '"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)') END)
           AS input_tokens,
       coalesce((response->'usage'->>'completion_tokens')::bigint, (response->'usage'->>'output_tokens')::bigint,
                CASE WHEN streamed THEN swarmlog_max_match(resp_text, '"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)') END)
           AS output_tokens,
       coalesce((response->'usage'->>'total_tokens')::bigint,
                coalesce((response->'usage'->>'prompt_tokens')::bigint, (response->'usage'->>'input_tokens')::bigint,
                         CASE WHEN streamed THEN swarmlog_max_match(resp_text, '"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)') END)
              + coalesce((response->'usage'->>'completion_tokens')::bigint, (response->'usage'->>'output_tokens')::bigint,
                         CASE WHEN streamed THEN swarmlog_max_match(resp_text, '"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)') END))
           AS total_tokens,
       (SELECT (h->>'value')::numeric FROM jsonb_array_elements(
            CASE WHEN jsonb_typeof(response_headers) = 'array' THEN response_headers ELSE '[]'::jsonb END) AS h
        WHERE lower(h->>'name') = 'openai-processing-ms' AND h->>'value' ~ '^\d+(\.\d+)?$' LIMIT 1) AS latency_ms,
       CASE WHEN jsonb_typeof(request->'messages') = 'array' THEN jsonb_array_length(request->'messages')
            WHEN jsonb_typeof(request->'input') = 'array' THEN jsonb_array_length(request->'input')
            WHEN request ? 'input' THEN 1 END AS messages,
       error, request, response, logged_at
FROM parsed;
