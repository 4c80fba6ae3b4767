-- Concept (MEDS export, MIMIC-III): each PATIENTS row as a subject: its gender (the static code GENDER//F|M)
-- and its birth (MEDS_BIRTH at DOB, shifted by MIMIC-III for patients over 89), its date of death (DOD, midnight;
-- an export-only column, NULL where the source lacks it: MEDS_DEATH when no admission has a death time), or the
-- reason it cannot be used (an unparseable value, no SUBJECT_ID, a SUBJECT_ID given twice): quarantined, as the
-- extraction does.
SELECT p.row_id, p.subject_id, p.gender, epoch(p.dob) AS birth_epoch, epoch(p.dod) AS dod_epoch,
       CASE
         WHEN p._error IS NOT NULL THEN p._error
         WHEN p.subject_id IS NULL THEN 'missing SUBJECT_ID'
         WHEN COUNT(*) OVER (PARTITION BY p.subject_id) > 1 THEN 'duplicate SUBJECT_ID in PATIENTS'
       END AS reason
FROM ${patients} p
