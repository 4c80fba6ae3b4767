-- Concept (MIMIC-IV): icu.inputevents (fluids and drugs, MetaVision) as events at starttime,
-- known at storetime. The amount of an infusion is only known when it ends, so it is used as
-- a value only if endtime precedes the prediction time (value_epoch). Rewritten orders
-- (statusdescription 'Rewritten', removed from the MIMIC-IV release) would be quarantined.
-- icu.ingredientevents (the ingredients of these same inputs: water, calories) is not read.
SELECT CAST(NULL AS BIGINT) AS row_id, e.subject_id, e.hadm_id, 'input' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.amount AS valuenum, CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.starttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       epoch(e.endtime) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.statusdescription = 'Rewritten' THEN 'Rewritten (superseded) order'
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.starttime IS NULL THEN 'missing STARTTIME'
       END AS reason
FROM ${inputevents} e
