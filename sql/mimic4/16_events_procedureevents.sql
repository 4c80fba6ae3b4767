-- Concept (MIMIC-IV): icu.procedureevents (lines, ventilation, dialysis ...) as events at
-- starttime, known at storetime. value (usually a duration) is only known at endtime
-- (value_epoch).
SELECT CAST(NULL AS BIGINT) AS row_id, e.subject_id, e.hadm_id, 'proc' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.value AS valuenum, CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.starttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       epoch(e.endtime) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.statusdescription = 'Rewritten' THEN 'Rewritten (superseded) order'
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.starttime IS NULL THEN 'missing STARTTIME'
       END AS reason
FROM ${procedureevents} e
