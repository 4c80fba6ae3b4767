-- Concept (MEDS export, MIMIC-IV): each patients row as a subject: its gender (the static code GENDER//F|M)
-- and its birth, MEDS_BIRTH on 1 January of anchor_year - anchor_age (MIMIC_IV_MEDS's convention; ages over
-- 89 are 91 in anchor_year), its date of death (dod, midnight; an export-only column, NULL where the source
-- lacks it: MEDS_DEATH when no admission has a death time, as MIMIC_IV_MEDS), or the reason it cannot be used (an
-- unparseable value, no subject_id, a subject_id given twice, no anchor_age or anchor_year): quarantined, as the
-- extraction does.
SELECT CAST(NULL AS BIGINT) AS row_id, p.subject_id, p.gender,
       CASE WHEN p.anchor_year - p.anchor_age BETWEEN 1000 AND 9999
            THEN epoch(CAST(CAST(p.anchor_year - p.anchor_age AS VARCHAR) || '-01-01 00:00:00' AS TIMESTAMP))
       END AS birth_epoch, epoch(p.dod) AS dod_epoch,
       CASE
         WHEN p._error IS NOT NULL THEN p._error
         WHEN p.subject_id IS NULL THEN 'missing SUBJECT_ID'
         WHEN COUNT(*) OVER (PARTITION BY p.subject_id) > 1 THEN 'duplicate SUBJECT_ID in PATIENTS'
         WHEN p.anchor_age IS NULL THEN 'missing ANCHOR_AGE'
         WHEN p.anchor_year IS NULL THEN 'missing ANCHOR_YEAR'
       END AS reason
FROM ${patients} p
