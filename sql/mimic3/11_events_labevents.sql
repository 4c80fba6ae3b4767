-- Concept (MIMIC-III): LABEVENTS as events, linked by SUBJECT_ID (not HADM_ID): outpatient labs and
-- labs of earlier admissions before the prediction time count as history.
-- Lab results carry no store time in MIMIC-III; CHARTTIME is the specimen time.
SELECT e.row_id, e.subject_id, e.hadm_id, 'lab' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.valuenum, e.value AS valuetext,
       epoch(e.charttime) AS event_epoch, CAST(NULL AS DOUBLE) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${labevents} e
