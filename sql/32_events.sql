-- Concept: every used event of the kept cohort with its admission's index, split and patient.
-- The parameter `used` is the UNION ALL of 30_events_used over the event tables present.
-- `adm` (local) holds the cohort admissions kept after the split (one row each: hadm_id,
-- subject_id, adm_idx, split; adm_idx numbers them in pseudonym order). Events of admissions
-- not in `adm` (the era split's excluded stays) are dropped here. subject_key is what the
-- vocabulary counts patients by.
SELECT a.adm_idx, a.split, a.subject_id AS subject_key, e.source, e.item, e.valuenum, e.valuetext, e.t_hours
FROM (${used}) e
JOIN adm a ON a.hadm_id = e.hadm_id
