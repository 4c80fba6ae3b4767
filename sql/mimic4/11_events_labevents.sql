-- Concept (MIMIC-IV): hosp.labevents as events at charttime (the specimen time), linked by
-- subject_id: outpatient labs (no hadm_id) and labs of earlier admissions count as history.
-- A result is known when it is stored: storetime must precede the prediction time, so a lab
-- drawn before T but resulted after it is not used (MIMIC-III has no lab store time and
-- counts it). A lab with no storetime has no stored result: never known (known_epoch +inf).
-- Row id: labevent_id.
SELECT e.labevent_id AS row_id, e.subject_id, e.hadm_id, 'lab' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.valuenum, e.value AS valuetext,
       epoch(e.charttime) AS event_epoch,
       COALESCE(epoch(e.storetime), CAST('infinity' AS DOUBLE)) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
         WHEN e.labevent_id IS NULL THEN 'missing LABEVENT_ID'
       END AS reason
FROM ${labevents} e
