-- Concept: the quantile cut points of every numeric item, fitted on the training split only.
-- One row per item key 'source:item' seen with a value in at least ${min_patients} training
-- patients; cuts = the interpolated quantiles [${quantiles}] of its values (the caller keeps
-- the distinct ones, ascending). Items in fewer patients get no bins (item token only).
SELECT source || ':' || item AS key, quantile_cont(valuenum, [${quantiles}]) AS cuts
FROM events
WHERE split = 'train' AND valuenum IS NOT NULL
GROUP BY source || ':' || item
HAVING count(DISTINCT subject_key) >= ${min_patients}
ORDER BY key
