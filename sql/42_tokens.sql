-- Concept: the token string of every event that meets the condition `event_filter`.
-- 'source:item:qB' for a numeric value of a binned item, B = the number of its cut points at
-- or below the value (bin_ranges_t: one row per bin, lo <= value < hi, -inf/+inf at the ends);
-- 'source:item:t:VALUE' for a text value of a categorical item (text_items_t), normalized as
-- in 41_fit_text_items; else 'source:item'. value: the value channel beside the token, for a
-- numeric value of a binned item (valuenum - center) / scale of its item (bin_ranges_t: the median
-- and half the spread of its cut points), clipped to [-${value_clip}, ${value_clip}]; else 0.
SELECT e.adm_idx, e.split, e.subject_key, e.t_hours, e.source,
       CASE
         WHEN e.valuenum IS NOT NULL AND b.key IS NOT NULL
           THEN e.source || ':' || e.item || ':q' || CAST(b.bin AS VARCHAR)
         WHEN e.valuenum IS NULL AND e.valuetext IS NOT NULL AND ti.key IS NOT NULL
           THEN e.source || ':' || e.item || ':t:' || replace(substr(trim(e.valuetext), 1, ${text_max_len}), ':', ';')
         ELSE e.source || ':' || e.item
       END AS token,
       CASE
         WHEN e.valuenum IS NOT NULL AND b.key IS NOT NULL
           THEN greatest(-${value_clip}, least(${value_clip}, (e.valuenum - b.center) / b.scale))
         ELSE 0.0
       END AS value
FROM events e
LEFT JOIN bin_ranges_t b
  ON b.key = e.source || ':' || e.item AND e.valuenum >= b.lo AND e.valuenum < b.hi
LEFT JOIN text_items_t ti ON ti.key = e.source || ':' || e.item
WHERE ${event_filter}
