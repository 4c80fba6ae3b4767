-- Concept: the newest ADMITTIME and DISCHTIME (epoch seconds) of the admissions that are not
-- quarantined: when scoring a census, the data is taken to end there unless as_of is given
-- (and as_of may not be earlier: the source would hold records after it).
SELECT max(admit_epoch) AS admit, max(disch_epoch) AS disch
FROM admissions_classified
WHERE exclusion IS NULL OR exclusion NOT LIKE 'quarantine:%'
