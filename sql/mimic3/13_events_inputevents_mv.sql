-- Concept (MIMIC-III): INPUTEVENTS_MV (MetaVision fluids and drugs) as events at STARTTIME.
-- The AMOUNT of an infusion is only known when it ends, so it is used as a value only if
-- ENDTIME precedes the prediction time (checked in the window step via value_epoch).
-- Rewritten orders (STATUSDESCRIPTION = 'Rewritten') were superseded: quarantined.
SELECT e.row_id, e.subject_id, e.hadm_id, 'input' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.amount AS valuenum, CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.starttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       epoch(e.endtime) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.statusdescription = 'Rewritten' THEN 'Rewritten (superseded) order'
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.starttime IS NULL THEN 'missing STARTTIME'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${inputevents_mv} e
