-- Concept (MIMIC-III): INPUTEVENTS_CV (CareVue fluids and drugs) as events: ITEMID with AMOUNT.
SELECT e.row_id, e.subject_id, e.hadm_id, 'input' AS source,
       CAST(e.itemid AS VARCHAR) AS item, e.amount AS valuenum, CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.charttime) AS event_epoch, epoch(e.storetime) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.itemid IS NULL THEN 'missing ITEMID'
         WHEN e.charttime IS NULL THEN 'missing CHARTTIME'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${inputevents_cv} e
