-- Concept: each admission's last used event, in hours after ADMITTIME. When scoring a census,
-- the data evidently reaches at least that time (observed_hours is raised to it).
SELECT adm_idx, max(t_hours) AS last_hours FROM events GROUP BY adm_idx
