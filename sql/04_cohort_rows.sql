-- Concept: the cohort as the extraction reads it (one row per admission, every column of
-- 02_cohort), in HADM_ID order so that what follows does not depend on the engine's row order.
SELECT * FROM cohort ORDER BY hadm_id
