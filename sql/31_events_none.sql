-- Concept: the used-events shape of 30_events_used with no rows, for a source that has no
-- event table at all (every admission then has zero bags).
SELECT CAST(NULL AS BIGINT) AS hadm_id, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS item,
       CAST(NULL AS DOUBLE) AS valuenum, CAST(NULL AS VARCHAR) AS valuetext, CAST(NULL AS DOUBLE) AS t_hours
WHERE 1 = 0
