-- Concept (MIMIC-III): MICROBIOLOGYEVENTS as events: the specimen sent (SPEC_ITEMID) at CHARTTIME, or
-- at the end of CHARTDATE when only the date is known. Organisms and susceptibilities
-- are results reported later with no result time in MIMIC-III: never used (they would
-- leak information recorded after the prediction time).
SELECT e.row_id, e.subject_id, e.hadm_id, 'micro' AS source,
       CAST(e.spec_itemid AS VARCHAR) AS item, CAST(NULL AS DOUBLE) AS valuenum,
       CAST(NULL AS VARCHAR) AS valuetext,
       COALESCE(epoch(e.charttime), epoch(e.chartdate) + 86400.0) AS event_epoch,
       CAST(NULL AS DOUBLE) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.spec_itemid IS NULL THEN 'missing SPEC_ITEMID'
         WHEN e.charttime IS NULL AND e.chartdate IS NULL THEN 'missing CHARTTIME and CHARTDATE'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${microbiologyevents} e
