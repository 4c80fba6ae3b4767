-- Concept: how many admissions meet the cohort criteria before any cohort condition (a
-- census's HADM_IDs or SQL condition) is applied: named when that condition keeps none.
SELECT count(*) AS n FROM admissions_classified WHERE exclusion IS NULL
