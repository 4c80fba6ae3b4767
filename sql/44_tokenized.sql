-- Concept: every event as a token id: the id of its token in the vocabulary (vocab_t), else
-- the id of its source's out-of-vocabulary token 'source:<oov>'. The parameter `tokens` is
-- 42_tokens over every event.
SELECT t.adm_idx, t.t_hours, COALESCE(v.tid, o.tid) AS tid
FROM (${tokens}) t
LEFT JOIN vocab_t v ON v.token = t.token
LEFT JOIN vocab_t o ON o.token = t.source || ':<oov>'
