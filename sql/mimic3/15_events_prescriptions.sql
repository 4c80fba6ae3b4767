-- Concept (MIMIC-III): PRESCRIPTIONS as events: FORMULARY_DRUG_CD with the numeric DOSE_VAL_RX.
-- STARTDATE has day resolution only, so a prescription is taken as known at the END of
-- its start day (STARTDATE + 1 day): never earlier than it could have been written.
-- Free-text drug names are never read. Non-numeric doses ('1-2') give no value.
SELECT e.row_id, e.subject_id, e.hadm_id, 'rx' AS source,
       e.formulary_drug_cd AS item,
       CASE WHEN regexp_matches(e.dose_val_rx, '^[0-9]+(\.[0-9]+)?$$')
            THEN CAST(e.dose_val_rx AS DOUBLE) END AS valuenum,
       CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.startdate) + 86400.0 AS event_epoch, CAST(NULL AS DOUBLE) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.formulary_drug_cd IS NULL THEN 'missing FORMULARY_DRUG_CD'
         WHEN e.startdate IS NULL THEN 'missing STARTDATE'
         WHEN e.row_id IS NULL THEN 'missing ROW_ID'
       END AS reason
FROM ${prescriptions} e
