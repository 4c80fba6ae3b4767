-- Concept (MIMIC-IV): hosp.prescriptions as events: formulary_drug_cd with the numeric
-- dose_val_rx, at starttime, a real time (MIMIC-III has the start day only, taken at its end).
-- Free-text drug names are never read. Non-numeric doses ('1-2') give no value.
-- hosp.emar (administrations) is not read: its medication is free text.
SELECT CAST(NULL AS BIGINT) AS row_id, e.subject_id, e.hadm_id, 'rx' AS source,
       e.formulary_drug_cd AS item,
       CASE WHEN regexp_matches(e.dose_val_rx, '^[0-9]+(\.[0-9]+)?$$')
            THEN CAST(e.dose_val_rx AS DOUBLE) END AS valuenum,
       CAST(NULL AS VARCHAR) AS valuetext,
       epoch(e.starttime) AS event_epoch, CAST(NULL AS DOUBLE) AS known_epoch,
       CAST(NULL AS DOUBLE) AS value_epoch,
       CASE
         WHEN e._error IS NOT NULL THEN e._error
         WHEN e.formulary_drug_cd IS NULL THEN 'missing FORMULARY_DRUG_CD'
         WHEN e.starttime IS NULL THEN 'missing STARTTIME'
       END AS reason
FROM ${prescriptions} e
