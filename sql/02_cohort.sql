-- Concept: the prediction cohort (admissions_classified without exclusion), with the
-- event window: events in [pred - lookback, pred) are used, where
-- lookback = ${lookback_days} days before the prediction time.
-- An optional cohort filter (scoring a census: HADM_IDs or a condition) restricts it further.
SELECT hadm_id, subject_id, admit_epoch, pred_epoch, dob_epoch, disch_epoch, era,
       pred_epoch - ${lookback_days} * 86400.0 AS window_start_epoch,
       age, gender, admission_type, admission_location, icu_system, label
FROM admissions_classified
WHERE exclusion IS NULL AND (${cohort_filter})
