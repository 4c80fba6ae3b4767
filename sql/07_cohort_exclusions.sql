-- Concept: the admissions outside the cohort, with why (the classification's exclusion or
-- quarantine reason): when scoring a census, the data owner's _private/unscored.csv says why each
-- requested admission got no score. The columns are those a census condition may use
-- (${census_columns}: contracts.COHORT_COLUMNS, no outcome), plus the exclusion.
SELECT ${census_columns}, exclusion
FROM (
  SELECT *, pred_epoch - ${lookback_days} * 86400.0 AS window_start_epoch
  FROM admissions_classified
  WHERE exclusion IS NOT NULL
) excluded
