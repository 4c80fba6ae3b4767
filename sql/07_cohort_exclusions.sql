-- Concept: the admissions outside the cohort, with why (the classification's exclusion or
-- quarantine reason): when scoring a census, the data owner's _private/unscored.csv says why each
-- requested admission got no score. The columns are those a census condition may use, plus the
-- exclusion.
SELECT hadm_id, subject_id, admit_epoch, pred_epoch, dob_epoch, disch_epoch, age, gender, admission_type,
       admission_location, icu_system, exclusion
FROM admissions_classified
WHERE exclusion IS NOT NULL
