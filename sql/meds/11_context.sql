-- Concept (MEDS): each labelled subject's context, from its rows of the shards (data): its static codes (the rows with a
-- null time, distinct) and its first MEDS_BIRTH (epoch microseconds). labels_t: the labels (subject_id, ...).
-- One row per subject and static code (code NULL: a subject without static rows), with the birth on each.
WITH s AS (SELECT DISTINCT subject_id FROM labels_t),
rows AS (
  SELECT d.subject_id, d.time, d.code FROM ${data} d WHERE d.subject_id IN (SELECT subject_id FROM s)
    AND (d.time IS NULL OR d.code = 'MEDS_BIRTH')
),
birth AS (
  SELECT subject_id, min(epoch_us(time)) AS birth_us FROM rows WHERE code = 'MEDS_BIRTH' AND time IS NOT NULL
  GROUP BY subject_id
),
static AS (SELECT DISTINCT subject_id, code FROM rows WHERE time IS NULL)
SELECT s.subject_id, b.birth_us, st.code
FROM s
LEFT JOIN birth b ON b.subject_id = s.subject_id
LEFT JOIN static st ON st.subject_id = s.subject_id
ORDER BY s.subject_id, st.code
