-- Concept: every admission, classified for the prediction cohort. Shared by the releases:
-- reads the staging shape of the release's 00_admissions_staged (parameter `staged`).
-- One row per ADMISSIONS row. `exclusion` is NULL for cohort members, else the reason:
--   quarantine reasons (unusable rows) start with 'quarantine:', cohort criteria do not.
-- Cohort: adult (18+) non-newborn admissions still in hospital, alive, at the prediction
-- time T = ADMITTIME + ${prediction_hours} hours.
-- Label: in-hospital death after T (HOSPITAL_EXPIRE_FLAG = 1 or a DEATHTIME).
-- open_admissions (TRUE only when scoring a census): an admission with no DISCHTIME is
-- still open (in hospital now) and is kept, with label 0 (unknown yet, never used); when
-- training or evaluating (FALSE) it cannot be labelled and is quarantined.
-- Ages are capped at 90 (both releases hide ages over 89).
-- Diagnosis and procedure codes are assigned at discharge: they are never read.
-- Times are compared as epoch seconds (same numbers on DuckDB and PostgreSQL).
WITH joined AS (
  SELECT s.*, s.admit_epoch + ${prediction_hours} * 3600.0 AS pred_epoch
  FROM (
${staged}
  ) s
)
SELECT row_id, subject_id, hadm_id, admit_epoch, pred_epoch, disch_epoch, dob_epoch,
       CASE WHEN age_raw > 90 THEN 90.0 ELSE age_raw END AS age,
       gender, admission_type, admission_location, icu_system, era,
       CASE WHEN death_epoch IS NOT NULL OR hospital_expire_flag = 1 THEN 1 ELSE 0 END AS label,
       CASE
         WHEN _error IS NOT NULL THEN 'quarantine:' || _error
         WHEN hadm_id IS NULL THEN 'quarantine:missing HADM_ID'
         WHEN subject_id IS NULL THEN 'quarantine:missing SUBJECT_ID'
         WHEN admit_epoch IS NULL THEN 'quarantine:missing ADMITTIME'
         WHEN disch_epoch IS NULL AND NOT ${open_admissions} THEN 'quarantine:missing DISCHTIME'
         WHEN n_same_hadm > 1 THEN 'quarantine:duplicate HADM_ID'
         WHEN patient_missing THEN 'quarantine:no PATIENTS row for SUBJECT_ID'
         WHEN patient_error IS NOT NULL THEN 'quarantine:PATIENTS row ' || patient_error
         WHEN n_same_subject > 1 THEN 'quarantine:duplicate SUBJECT_ID in PATIENTS'
         WHEN age_missing IS NOT NULL THEN 'quarantine:' || age_missing
         WHEN disch_epoch < admit_epoch THEN 'quarantine:DISCHTIME before ADMITTIME'
         WHEN age_invalid IS NOT NULL THEN 'quarantine:' || age_invalid
         WHEN admission_type = 'NEWBORN' THEN 'newborn'
         WHEN age_raw < 18 THEN 'under 18'
         WHEN death_epoch IS NOT NULL AND death_epoch <= pred_epoch THEN 'died before prediction time'
         WHEN disch_epoch <= pred_epoch THEN 'discharged before prediction time'
         ELSE NULL
       END AS exclusion
FROM joined
