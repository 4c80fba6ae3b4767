-- Concept (MIMIC-III): PROCEDUREEVENTS_MV (lines, ventilation, dialysis ...) as events at STARTTIME.
-- VALUE (usually a duration) is only known at ENDTIME (value_epoch).
SELECT e.row_id, e.subject_id, e.hadm_id, 'proc' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.value AS valuenum, CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.starttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       epoch(e.endtime) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.statusdescription = 'Rewritten' THEN 'Rewritten (superseded) order'
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.starttime IS NULL THEN 'missing STARTTIME'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${procedureevents_mv} e
