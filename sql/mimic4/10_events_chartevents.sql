-- Concept (MIMIC-IV): icu.chartevents as events. Token item = itemid; numeric valuenum, else
-- text value. Known at storetime (when it was recorded), which must precede the prediction
-- time. MIMIC-IV has no ERROR column (its audit rows are not released) and no ROW_ID.
SELECT CAST(NULL AS BIGINT) AS row_id, e.subject_id, e.hadm_id, 'chart' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.valuenum, e.value AS valuetext,
       epoch(e.charttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
       END AS reason
FROM ${chartevents} e
