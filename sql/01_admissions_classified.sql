-- Concept: every admission, classified for the prediction cohort.
-- One row per ADMISSIONS row. `exclusion` is NULL for cohort members, else the reason:
--   quarantine reasons (unusable rows) start with 'quarantine:', cohort criteria do not.
-- Cohort: adult (18+) non-newborn admissions still in hospital, alive, at the prediction
-- time T = ADMITTIME + ${prediction_hours} hours.
-- Label: in-hospital death after T (HOSPITAL_EXPIRE_FLAG = 1 or a DEATHTIME).
-- open_admissions (TRUE only when scoring a census): an admission with no DISCHTIME is
-- still open (in hospital now) and is kept, with label 0 (unknown yet, never used); when
-- training or evaluating (FALSE) it cannot be labelled and is quarantined.
-- Ages: MIMIC-III shifts the date of birth of patients older than 89 so that computed
-- ages are near 300; ages are capped at 90. Ages use 365.2425-day years.
-- Diagnosis and procedure codes are assigned at discharge: they are never read.
-- Times are compared as epoch seconds (same numbers on DuckDB and PostgreSQL).
WITH adm AS (
  SELECT a.row_id, a.subject_id, a.hadm_id, a.admission_type, a.admission_location,
         a.hospital_expire_flag, a._error,
         epoch(a.admittime) AS admit_epoch,
         epoch(a.dischtime) AS disch_epoch,
         epoch(COALESCE(a.deathtime,
                        CASE WHEN a.hospital_expire_flag = 1 THEN a.dischtime END)) AS death_epoch,
         COUNT(*) OVER (PARTITION BY a.hadm_id) AS n_same_hadm
  FROM ${admissions} a
),
pat AS (
  SELECT p.subject_id, p.gender, epoch(p.dob) AS dob_epoch, p._error,
         COUNT(*) OVER (PARTITION BY p.subject_id) AS n_same_subject
  FROM ${patients} p
),
icu AS (
  SELECT i.hadm_id, i.dbsource,
         ROW_NUMBER() OVER (PARTITION BY i.hadm_id ORDER BY i.intime, i.icustay_id) AS rn
  FROM ${icustays} i
  WHERE i.hadm_id IS NOT NULL
),
joined AS (
  SELECT adm.*, pat.gender, pat.dob_epoch, pat._error AS patient_error,
         pat.n_same_subject,
         (adm.admit_epoch - pat.dob_epoch) / 31556952.0 AS age_raw,
         adm.admit_epoch + ${prediction_hours} * 3600.0 AS pred_epoch,
         COALESCE(LOWER(icu.dbsource), 'none') AS icu_system
  FROM adm
  LEFT JOIN pat ON pat.subject_id = adm.subject_id
  LEFT JOIN icu ON icu.hadm_id = adm.hadm_id AND icu.rn = 1
)
SELECT row_id, subject_id, hadm_id, admit_epoch, pred_epoch, disch_epoch, dob_epoch,
       CASE WHEN age_raw > 90 THEN 90.0 ELSE age_raw END AS age,
       gender, admission_type, admission_location, icu_system,
       CASE WHEN death_epoch IS NOT NULL OR hospital_expire_flag = 1 THEN 1 ELSE 0 END AS label,
       CASE
         WHEN _error IS NOT NULL THEN 'quarantine:' || _error
         WHEN hadm_id IS NULL THEN 'quarantine:missing HADM_ID'
         WHEN subject_id IS NULL THEN 'quarantine:missing SUBJECT_ID'
         WHEN admit_epoch IS NULL THEN 'quarantine:missing ADMITTIME'
         WHEN disch_epoch IS NULL AND NOT ${open_admissions} THEN 'quarantine:missing DISCHTIME'
         WHEN n_same_hadm > 1 THEN 'quarantine:duplicate HADM_ID'
         WHEN dob_epoch IS NULL AND patient_error IS NULL AND gender IS NULL
           THEN 'quarantine:no PATIENTS row for SUBJECT_ID'
         WHEN patient_error IS NOT NULL THEN 'quarantine:PATIENTS row ' || patient_error
         WHEN n_same_subject > 1 THEN 'quarantine:duplicate SUBJECT_ID in PATIENTS'
         WHEN dob_epoch IS NULL THEN 'quarantine:missing DOB'
         WHEN disch_epoch < admit_epoch THEN 'quarantine:DISCHTIME before ADMITTIME'
         WHEN admit_epoch < dob_epoch THEN 'quarantine:ADMITTIME before DOB'
         WHEN admission_type = 'NEWBORN' THEN 'newborn'
         WHEN age_raw < 18 THEN 'under 18'
         WHEN death_epoch IS NOT NULL AND death_epoch <= pred_epoch THEN 'died before prediction time'
         WHEN disch_epoch <= pred_epoch THEN 'discharged before prediction time'
         ELSE NULL
       END AS exclusion
FROM joined
