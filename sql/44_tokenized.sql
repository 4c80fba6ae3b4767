-- Concept: every event as a token id: the id of its token in the vocabulary (vocab_t), else
-- the id of its source's out-of-vocabulary token 'source:<oov>'. The parameter `tokens` is
-- 42_tokens over every event; the event's value channel (42_tokens) rides along, 0 for an
-- out-of-vocabulary token (it stands for many items and bins: no one scale).
SELECT t.adm_idx, t.t_hours, COALESCE(v.tid, o.tid) AS tid, CASE WHEN v.tid IS NULL THEN 0.0 ELSE t.value END AS value
FROM (${tokens}) t
LEFT JOIN vocab_t v ON v.token = t.token
LEFT JOIN vocab_t o ON o.token = t.source || ':<oov>'
