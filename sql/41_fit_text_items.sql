-- Concept: the categorical text items, fitted on the training split only: an item key whose
-- text values (events without a number) take at most ${max_text_values} distinct normalized
-- values. Their values become tokens; other text items (free text) give the item token only.
-- A normalized value is trimmed, cut to ${text_max_len} characters, ':' replaced by ';' (so a
-- token stays parseable); 42_tokens normalizes the same way.
SELECT source || ':' || item AS key
FROM events
WHERE split = 'train' AND valuenum IS NULL AND valuetext IS NOT NULL
GROUP BY source || ':' || item
HAVING count(DISTINCT replace(substr(trim(valuetext), 1, ${text_max_len}), ':', ';')) <= ${max_text_values}
ORDER BY key
