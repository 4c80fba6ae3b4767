-- Concept (MIMIC-IV): every admissions row (hosp) in the staging shape that
-- 01_admissions_classified reads, one row each: the admission (times as epoch seconds), its
-- patient (hosp.patients) with the age at admission, and whether it had an ICU stay.
-- Age: anchor_age is the patient's age in anchor_year (a shifted year); the age at admission
-- is anchor_age + (year of ADMITTIME - anchor_year), in whole years. MIMIC-IV gives every
-- patient older than 89 in anchor_year the anchor_age 91, so any age above 89 is taken as 91
-- (01 caps ages at 90, as for MIMIC-III).
-- Date of birth: not in MIMIC-IV. dob_epoch is the earliest it can be, 1 January of
-- (anchor_year - anchor_age - 1), for the "event before birth" check; NULL when older than 89.
-- Death: deathtime, or dischtime when hospital_expire_flag = 1 and deathtime is empty.
-- ICU: every MIMIC-IV ICU stay is charted in MetaVision: icu_system is 'metavision' when
-- icustays has a stay of the admission (stay_id), else 'none'.
-- era: the patient's anchor_year_group (the real 3-year window of anchor_year), which the
-- MIMIC-IV era split uses. MIMIC-IV has no ROW_ID: row_id is NULL.
-- Release-specific quarantine reasons: age_missing (no anchor_age or anchor_year), age_invalid
-- (an admission before the birth year); patient_missing: no patients row matched.
WITH adm AS (
  SELECT CAST(NULL AS BIGINT) AS row_id, a.subject_id, a.hadm_id, a.admission_type, a.admission_location,
         a.hospital_expire_flag, a._error,
         epoch(a.admittime) AS admit_epoch,
         epoch(a.dischtime) AS disch_epoch,
         epoch(COALESCE(a.deathtime,
                        CASE WHEN a.hospital_expire_flag = 1 THEN a.dischtime END)) AS death_epoch,
         extract(year FROM a.admittime) AS admit_year,
         COUNT(*) OVER (PARTITION BY a.hadm_id) AS n_same_hadm
  FROM ${admissions} a
),
pat AS (
  SELECT p.subject_id, p.gender, p.anchor_age, p.anchor_year, p.anchor_year_group, p._error,
         COUNT(*) OVER (PARTITION BY p.subject_id) AS n_same_subject
  FROM ${patients} p
),
icu AS (
  SELECT DISTINCT i.hadm_id FROM ${icustays} i WHERE i.hadm_id IS NOT NULL
),
joined AS (
  SELECT adm.*, pat.subject_id AS patient_subject, pat.gender, pat._error AS patient_error,
         pat.n_same_subject, pat.anchor_age, pat.anchor_year, pat.anchor_year_group,
         pat.anchor_age + (adm.admit_year - pat.anchor_year) AS age_years,
         pat.anchor_year - pat.anchor_age - 1 AS birth_year_min,
         icu.hadm_id AS icu_hadm
  FROM adm
  LEFT JOIN pat ON pat.subject_id = adm.subject_id
  LEFT JOIN icu ON icu.hadm_id = adm.hadm_id
)
SELECT row_id, subject_id, hadm_id, admission_type, admission_location, hospital_expire_flag, _error,
       admit_epoch, disch_epoch, death_epoch, n_same_hadm, gender,
       CASE WHEN anchor_age <= 89 AND birth_year_min BETWEEN 1000 AND 9999
            THEN epoch(CAST(CAST(birth_year_min AS VARCHAR) || '-01-01 00:00:00' AS TIMESTAMP)) END AS dob_epoch,
       patient_error, patient_subject IS NULL AS patient_missing, n_same_subject,
       CASE WHEN anchor_age > 89 OR age_years > 89 THEN 91.0 ELSE CAST(age_years AS DOUBLE) END AS age_raw,
       CASE WHEN anchor_age IS NULL THEN 'missing ANCHOR_AGE'
            WHEN anchor_year IS NULL THEN 'missing ANCHOR_YEAR' END AS age_missing,
       CASE WHEN age_years < 0 THEN 'ADMITTIME before the birth year (ANCHOR_YEAR - ANCHOR_AGE)' END AS age_invalid,
       CASE WHEN icu_hadm IS NOT NULL THEN 'metavision' ELSE 'none' END AS icu_system,
       anchor_year_group AS era
FROM joined
