-- Concept (MIMIC-IV): hosp.microbiologyevents as events: the specimen sent (spec_itemid) at
-- charttime, or at the end of chartdate when only the date is known. Organisms and
-- susceptibilities are results (stored at storedate/storetime, after the specimen): not used,
-- as for MIMIC-III. Row id: microevent_id.
SELECT e.microevent_id AS row_id, e.subject_id, e.hadm_id, 'micro' AS source,
       CAST(e.spec_itemid AS VARCHAR) AS item, CAST(NULL AS DOUBLE) AS valuenum,
       CAST(NULL AS VARCHAR) AS valuetext,
       COALESCE(epoch(e.charttime), epoch(e.chartdate) + 86400.0) AS event_epoch,
       CAST(NULL AS DOUBLE) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.spec_itemid IS NULL THEN 'missing SPEC_ITEMID'
         WHEN e.charttime IS NULL AND e.chartdate IS NULL THEN 'missing CHARTTIME and CHARTDATE'
         WHEN e.microevent_id IS NULL THEN 'missing MICROEVENT_ID'
       END AS reason
FROM ${microbiologyevents} e
