-- Concept (MEDS export): the rows of one event table in the extraction's staging shape (x_<table>, the
-- release's sql/<release>/1x_events_<table>) as MEDS events, or the reason a row cannot be used. Local.
-- Codes follow MIMIC_IV_MEDS where its tables correspond (docs/meds.md): chart and lab LAB//<itemid>//UNK,
-- output SUBJECT_FLUID_OUTPUT//<itemid>//UNK (the unit is not read: UNK), input INFUSION_START//<itemid>
-- (with its amount, known at its end), procedure PROCEDURE//START//<itemid>; the project's own where it has
-- none: prescriptions PRESCRIPTION//<formulary_drug_cd>, microbiology MICROBIOLOGY//SPECIMEN//<spec_itemid>,
-- datetime events DATETIME_EVENT//<itemid>.
-- time: the event time of the staging SQL; known_time: when it was recorded (STORETIME), value_time: when its
-- value became known (an infusion's or procedure's end), both NULL where the table has none.
-- Quarantined as the extraction quarantines: the staging's reason (unparseable values, ERROR = 1, Rewritten,
-- missing item or time), no SUBJECT_ID, an event before the patient's birth, or more than 24 h after the
-- discharge of the admission its HADM_ID names; a MIMIC-IV lab with no STORETIME (its result never known:
-- the extraction never uses it); and a subject of no usable PATIENTS, ADMISSIONS or ICUSTAYS row (shard_map: a
-- MEDS subject is one of those; the extraction never uses such an event either).
SELECT e.row_id, e.subject_id, e.hadm_id, e.source, e.item,
       CASE e.source
         WHEN 'chart' THEN 'LAB//' || e.item || '//UNK'
         WHEN 'lab' THEN 'LAB//' || e.item || '//UNK'
         WHEN 'output' THEN 'SUBJECT_FLUID_OUTPUT//' || e.item || '//UNK'
         WHEN 'input' THEN 'INFUSION_START//' || e.item
         WHEN 'proc' THEN 'PROCEDURE//START//' || e.item
         WHEN 'rx' THEN 'PRESCRIPTION//' || e.item
         WHEN 'micro' THEN 'MICROBIOLOGY//SPECIMEN//' || e.item
         WHEN 'dtevent' THEN 'DATETIME_EVENT//' || e.item
       END AS code,
       e.event_epoch, e.valuenum, e.valuetext,
       CASE WHEN isfinite(e.known_epoch) THEN e.known_epoch END AS known_epoch, e.value_epoch,
       CASE
         WHEN e.reason IS NOT NULL THEN e.reason
         WHEN e.subject_id IS NULL THEN 'missing SUBJECT_ID'
         WHEN m.subject_id IS NULL THEN 'SUBJECT_ID of no PATIENTS, ADMISSIONS or ICUSTAYS row'
         WHEN e.known_epoch IS NOT NULL AND NOT isfinite(e.known_epoch) THEN 'no STORETIME (the result is never known)'
         WHEN p.birth_epoch IS NOT NULL AND e.event_epoch < p.birth_epoch THEN 'event before date of birth'
         WHEN a.disch_epoch IS NOT NULL AND e.event_epoch > a.disch_epoch + 86400.0
           THEN 'event more than 24 h after discharge'
       END AS reason
FROM ${events} e
LEFT JOIN x_patients p ON p.subject_id = e.subject_id AND p.reason IS NULL
LEFT JOIN x_admissions a ON a.hadm_id = e.hadm_id
LEFT JOIN shard_map m ON m.subject_id = e.subject_id
