-- Concept: the cohort's patients, each with the date of birth of the cohort row (one row per
-- distinct pair). The build side of the SUBJECT_ID-linked event window
-- (21_events_window_subject), which quarantines events before the patient's birth.
SELECT DISTINCT subject_id, dob_epoch FROM cohort
