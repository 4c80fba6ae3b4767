-- Concept: the used events of one event table's window (ev_<table>, rows with no quarantine
-- reason), in the columns every table shares. 32_events stacks these (UNION ALL).
SELECT hadm_id, source, item, valuenum, valuetext, t_hours
FROM ${window} WHERE reason IS NULL
