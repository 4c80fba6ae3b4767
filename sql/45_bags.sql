-- Concept: time bags. Events at or after ${edge} hours after ADMITTIME (the last hours before
-- the prediction time) fall in hourly bags [h, h + 1); older history in daily bags
-- [${edge} + 24 k, ${edge} + 24 (k + 1)). One row per admission and bag, in (adm_idx, start)
-- order: the bag's start bag_start (hours after ADMITTIME), its distinct token ids ascending, the
-- mean value channel of each id's events in the bag (vals, in the same order), and its events. The
-- caller nests the rows of an admission into its lists.
WITH e AS (
  SELECT adm_idx, tid, value,
         CASE WHEN t_hours >= ${edge} THEN floor(t_hours)
              ELSE ${edge} + floor((t_hours - ${edge}) / 24.0) * 24.0 END AS start
  FROM tokenized
),
per_token AS (
  SELECT adm_idx, start, tid, count(*) AS n, avg(value) AS value FROM e GROUP BY adm_idx, start, tid
)
SELECT adm_idx, CAST(start AS FLOAT) AS bag_start, list(tid ORDER BY tid) AS tids,
       list(value ORDER BY tid) AS vals, CAST(sum(n) AS INTEGER) AS n
FROM per_token
GROUP BY adm_idx, start
ORDER BY adm_idx, start
