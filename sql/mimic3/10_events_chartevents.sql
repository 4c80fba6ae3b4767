-- Concept (MIMIC-III): CHARTEVENTS as events. Token item = ITEMID; numeric VALUENUM, else text VALUE.
-- Rows with ERROR = 1 are quarantined (counted, never used). The event is known at
-- STORETIME (when it was recorded), which must also precede the prediction time.
SELECT e.row_id, e.subject_id, e.hadm_id, 'chart' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.valuenum, e.value AS valuetext,
       epoch(e.charttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.error = 1 THEN 'ERROR flag set'
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${chartevents} e
