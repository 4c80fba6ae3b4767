-- Concept (MEDS export): each ICU stay's start (ICU_ADMISSION at INTIME), or why it cannot be used. Shared by
-- the releases (both have subject_id, hadm_id and intime).
SELECT i.subject_id, i.hadm_id, epoch(i.intime) AS intime_epoch,
       CASE
         WHEN i._error IS NOT NULL THEN i._error
         WHEN i.subject_id IS NULL THEN 'missing SUBJECT_ID'
         WHEN i.intime IS NULL THEN 'missing INTIME'
       END AS reason
FROM ${icustays} i
