-- Concept (MEDS export): the admissions that are not quarantined, with their times, death, discharge location and
-- emergency-department times, for the MEDS events HOSPITAL_ADMISSION, HOSPITAL_DISCHARGE, MEDS_DEATH, ED_REGISTRATION
-- and ED_OUT. Shared by the releases: admissions_classified (01, materialized in the source) says which rows are
-- quarantined (its reasons, as the extraction's); the release's staging SQL (parameter staged) gives the death time
-- (DEATHTIME, else DISCHTIME when HOSPITAL_EXPIRE_FLAG = 1); DISCHARGE_LOCATION, EDREGTIME and EDOUTTIME come from
-- the source's admissions (export-only columns: NULL where a source lacks them). A kept admission's HADM_ID is unique
-- (duplicates are quarantined), so the joins on it are one row each. Every cohort criterion (age, death or discharge
-- before T) is the task's (ACES).
SELECT s.subject_id, s.hadm_id, s.admit_epoch, s.disch_epoch, s.death_epoch, s.admission_type,
       s.admission_location, a.discharge_location, epoch(a.edregtime) AS edreg_epoch,
       epoch(a.edouttime) AS edout_epoch
FROM admissions_classified c
JOIN (
${staged}
) s ON s.hadm_id = c.hadm_id
JOIN ${admissions} a ON a.hadm_id = s.hadm_id
WHERE c.exclusion IS NULL OR c.exclusion NOT LIKE 'quarantine:%'
