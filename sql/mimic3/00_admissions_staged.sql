-- Concept (MIMIC-III): every ADMISSIONS row in the staging shape that 01_admissions_classified
-- reads, one row each: the admission (times as epoch seconds), its patient (PATIENTS) with the
-- age at admission, and its ICU system (the first ICUSTAYS stay's DBSOURCE).
-- Ages: MIMIC-III shifts the date of birth of patients older than 89 so that computed ages
-- are near 300 (01 caps them at 90). Ages use 365.2425-day years.
-- Death: DEATHTIME, or DISCHTIME when HOSPITAL_EXPIRE_FLAG = 1 and DEATHTIME is empty.
-- Release-specific quarantine reasons: age_missing (no DOB), age_invalid (ADMITTIME before
-- DOB); patient_missing: no PATIENTS row matched. era: none in MIMIC-III (the era split uses
-- the ICU system).
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
)
SELECT adm.row_id, adm.subject_id, adm.hadm_id, adm.admission_type, adm.admission_location,
       adm.hospital_expire_flag, adm._error, adm.admit_epoch, adm.disch_epoch, adm.death_epoch,
       adm.n_same_hadm, pat.gender, pat.dob_epoch, pat._error AS patient_error,
       pat.dob_epoch IS NULL AND pat._error IS NULL AND pat.gender IS NULL AS patient_missing,
       pat.n_same_subject,
       (adm.admit_epoch - pat.dob_epoch) / 31556952.0 AS age_raw,
       CASE WHEN pat.dob_epoch IS NULL THEN 'missing DOB' END AS age_missing,
       CASE WHEN adm.admit_epoch < pat.dob_epoch THEN 'ADMITTIME before DOB' END AS age_invalid,
       COALESCE(LOWER(icu.dbsource), 'none') AS icu_system,
       CAST(NULL AS VARCHAR) AS era
FROM adm
LEFT JOIN pat ON pat.subject_id = adm.subject_id
LEFT JOIN icu ON icu.hadm_id = adm.hadm_id AND icu.rn = 1
