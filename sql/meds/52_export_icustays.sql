-- Concept (MEDS export): each ICU stay's start (ICU_ADMISSION//<first care unit> at INTIME) and end
-- (ICU_DISCHARGE//<last care unit> at OUTTIME, none without one), or why it cannot be used. Shared by the releases
-- (both have subject_id, hadm_id, intime, outtime, first_careunit and last_careunit; the last three are export-only
-- columns, NULL where a source lacks them: the care unit is then UNK).
SELECT i.subject_id, i.hadm_id, epoch(i.intime) AS intime_epoch, epoch(i.outtime) AS outtime_epoch,
       i.first_careunit, i.last_careunit,
       CASE
         WHEN i._error IS NOT NULL THEN i._error
         WHEN i.subject_id IS NULL THEN 'missing SUBJECT_ID'
         WHEN i.intime IS NULL THEN 'missing INTIME'
       END AS reason
FROM ${icustays} i
