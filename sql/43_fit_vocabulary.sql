-- Concept: the token vocabulary, fitted on the training split only: the tokens of the
-- parameter `tokens` (42_tokens over the training events) seen in at least ${min_patients}
-- training patients, in byte order. Rarer tokens map to their source's out-of-vocabulary token.
SELECT token FROM (${tokens}) t
GROUP BY token
HAVING count(DISTINCT subject_key) >= ${min_patients}
ORDER BY token
