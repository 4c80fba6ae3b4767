-- Concept: the prediction cohort (admissions_classified without exclusion), with the
-- event window: events in [pred - lookback, pred) are used, where
-- lookback = ${lookback_days} days before the prediction time.
-- An optional cohort filter (scoring a census: HADM_IDs or a condition) restricts it further.
-- The condition is applied to `census`, a projection of the census columns only
-- (${census_columns}: contracts.COHORT_COLUMNS), in a query of its own (nothing outer to refer
-- to): no form of it (a column regex, a row struct) can reach an outcome (label, disch_epoch).
WITH census AS (
  SELECT ${census_columns}
  FROM (
    SELECT *, pred_epoch - ${lookback_days} * 86400.0 AS window_start_epoch
    FROM admissions_classified
    WHERE exclusion IS NULL
  ) eligible
), chosen AS (
  SELECT hadm_id FROM census WHERE (${cohort_filter})
)
SELECT hadm_id, subject_id, admit_epoch, pred_epoch, dob_epoch, disch_epoch, era,
       pred_epoch - ${lookback_days} * 86400.0 AS window_start_epoch,
       age, gender, admission_type, admission_location, icu_system, label
FROM admissions_classified
WHERE exclusion IS NULL AND hadm_id IN (SELECT hadm_id FROM chosen)
