-- Concept (MEDS): every timed event of a labelled subject inside the lookback of each of its labels, in the
-- window shape that 30_events_used reads (hadm_id, source, item, valuenum, valuetext, t_hours, reason), plus
-- the event's shard (file) and row (rn) for the accounting and the quarantine. Shared by every MEDS dataset.
-- data: every shard's rows (layout.data_relation: file, rn, subject_id, time, code, numeric_value, text_value,
-- known_time, value_time); labels_t (local):
-- one row per label (sample_id, subject_id, pred_us = the prediction time T in epoch microseconds);
-- sample_id stands where MIMIC has the HADM_ID (32_events joins the kept labels, `adm`, on it).
-- The window is [T - lookback_days, T]: MEDS's prediction_time is the INCLUSIVE end of the data a model
-- may use, so an event at exactly T is used; its t_hours is set 1e-9 h before T, so that it joins the last
-- hourly bag [-1, 0) (45_bags) instead of opening a bag at the origin. t_hours: hours relative to T (<= 0).
-- known_time / value_time (the project's export; NULL where the dataset lacks them): an event recorded after T
-- is not used; a value known only after T is dropped (the code's token without a value), as for MIMIC.
-- grp: the code's group, what comes before its first '//' (LAB//50912//mg/dL -> LAB; ':' becomes ';'),
-- NULL for a code without one; the extraction maps it to a token source (one OOV token per source).
-- Static rows (null time) are context, not events: not returned. A non-finite numeric_value is quarantined
-- (reason set; one row per source row); rows not returned are outside every label's window.
WITH ev AS (
  SELECT file, rn, subject_id, code,
         epoch_us(time) AS us,
         CAST(numeric_value AS DOUBLE) AS numeric_value,
         substr(CAST(text_value AS VARCHAR), 1, 1000) AS text_value,
         epoch_us(known_time) AS known_us,
         epoch_us(value_time) AS value_us,
         CASE WHEN numeric_value IS NOT NULL AND NOT isfinite(numeric_value)
              THEN 'non-finite numeric_value' END AS reason
  FROM ${data} d
  WHERE time IS NOT NULL
)
SELECT ev.file, ev.rn, l.sample_id AS hadm_id,
       CASE WHEN strpos(ev.code, '//') > 1 THEN replace(split_part(ev.code, '//', 1), ':', ';') END AS grp,
       ev.code AS item,
       CASE WHEN ev.value_us IS NULL OR ev.value_us <= l.pred_us THEN ev.numeric_value END AS valuenum,
       ev.text_value AS valuetext,
       CASE WHEN ev.us = l.pred_us THEN -1e-9 ELSE (ev.us - l.pred_us) / 3600000000.0 END AS t_hours,
       ev.reason
FROM ev
LEFT JOIN labels_t l
  ON ev.reason IS NULL
 AND l.subject_id = ev.subject_id
 AND ev.us <= l.pred_us
 AND ev.us >= l.pred_us - CAST(${lookback_days} * 86400000000.0 AS BIGINT)
 AND (ev.known_us IS NULL OR ev.known_us <= l.pred_us)
WHERE ev.reason IS NOT NULL OR l.sample_id IS NOT NULL
