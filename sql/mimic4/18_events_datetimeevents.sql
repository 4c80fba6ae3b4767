-- Concept (MIMIC-IV): icu.datetimeevents as events: itemid only (the value is a calendar
-- date: never used), known at storetime.
SELECT CAST(NULL AS BIGINT) AS row_id, e.subject_id, e.hadm_id, 'dtevent' AS source,
       CAST(e.itemid AS VARCHAR) AS item, CAST(NULL AS DOUBLE) AS valuenum,
       CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.charttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
       END AS reason
FROM ${datetimeevents} e
