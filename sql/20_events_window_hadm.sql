-- Concept: one HADM_ID-linked table's events joined to the cohort, before the prediction
-- time. Shared by the releases: `events` is the release's event SQL (sql/mimic3/1x_*,
-- sql/mimic4/1x_*), one row shape, with the row's own quarantine reason (if any).
-- One hash join on HADM_ID (the cohort is the small build side); the window and the
-- sanity checks are then plain expressions, so the scan streams.
-- Returns used events (reason NULL) and quarantined rows (reason set), one row per source
-- row. Rows not returned are outside the window: not of a cohort admission, at or after
-- the prediction time, recorded (STORETIME) at or after it, or older than the lookback.
-- An event's value is dropped (token without value) when the value is only known at or
-- after the prediction time (value_epoch). Impossible rows of cohort admissions are
-- quarantined: an event before the patient's birth, or more than 24 h after discharge.
WITH ev AS (
${events}
),
joined AS (
  SELECT ev.*, c.hadm_id AS cohort_hadm, c.admit_epoch, c.pred_epoch, c.window_start_epoch,
         c.dob_epoch, c.disch_epoch
  FROM ev
  LEFT JOIN cohort c ON c.hadm_id = ev.hadm_id
),
checked AS (
  SELECT joined.*,
         CASE
           WHEN reason IS NOT NULL THEN reason
           WHEN dob_epoch IS NOT NULL AND event_epoch < dob_epoch THEN 'event before date of birth'
           WHEN disch_epoch IS NOT NULL AND event_epoch > disch_epoch + 86400.0
             THEN 'event more than 24 h after discharge'
         END AS why
  FROM joined
)
SELECT row_id,
       CASE WHEN why IS NULL THEN cohort_hadm END AS hadm_id,
       source, item,
       CASE WHEN value_epoch IS NULL OR value_epoch < pred_epoch THEN valuenum END AS valuenum,
       valuetext,
       (event_epoch - admit_epoch) / 3600.0 AS t_hours,
       why AS reason
FROM checked
WHERE why IS NOT NULL
   OR (cohort_hadm IS NOT NULL
       AND event_epoch < pred_epoch
       AND event_epoch >= window_start_epoch
       AND COALESCE(known_epoch, event_epoch) < pred_epoch)
