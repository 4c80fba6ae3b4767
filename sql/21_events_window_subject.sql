-- Concept: one SUBJECT_ID-linked table's events (labs) joined to the cohort, before the
-- prediction time. Shared by the releases (`events`: the release's event SQL, one row
-- shape). An event can serve several admissions of the patient (history).
-- Returns used events (reason NULL; one row per admission and event) and quarantined
-- rows (reason set; one row per source row). Rows not returned are outside the window:
-- not of a cohort admission, at or after the prediction time, recorded (STORETIME) at or
-- after it, or older than the lookback. An event's value is dropped (token without value)
-- when the value is only known at or after the prediction time (value_epoch).
-- Events link to the cohort by ${link_key} (labs by SUBJECT_ID: history counts).
-- Impossible rows are quarantined: an event before the patient's birth, or more than 24 h
-- after the discharge of the cohort admission its HADM_ID names.
WITH ev AS (
${events}
),
checked AS (
  SELECT ev.*,
         CASE
           WHEN ev.reason IS NOT NULL THEN ev.reason
           WHEN s.dob_epoch IS NOT NULL AND ev.event_epoch < s.dob_epoch THEN 'event before date of birth'
           WHEN d.disch_epoch IS NOT NULL AND ev.event_epoch > d.disch_epoch + 86400.0
             THEN 'event more than 24 h after discharge'
         END AS why
  FROM ev
  LEFT JOIN cohort_subjects s ON s.subject_id = ev.subject_id
  LEFT JOIN cohort d ON d.hadm_id = ev.hadm_id
)
SELECT checked.row_id, c.hadm_id, checked.source, checked.item,
       CASE WHEN checked.value_epoch IS NULL OR checked.value_epoch < c.pred_epoch
            THEN checked.valuenum END AS valuenum,
       checked.valuetext,
       (checked.event_epoch - c.admit_epoch) / 3600.0 AS t_hours,
       checked.why AS reason
FROM checked
LEFT JOIN cohort c
  ON checked.why IS NULL
 AND c.${link_key} = checked.${link_key}
 AND checked.event_epoch < c.pred_epoch
 AND checked.event_epoch >= c.window_start_epoch
 AND COALESCE(checked.known_epoch, checked.event_epoch) < c.pred_epoch
WHERE checked.why IS NOT NULL OR c.hadm_id IS NOT NULL
