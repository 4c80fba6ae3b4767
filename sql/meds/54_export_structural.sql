-- Concept (MEDS export): the events of the patients, admissions, deaths, emergency-department visits and ICU stays
-- (x_patients, x_admissions, x_icustays: 51, 50 and 52, materialized locally), as (subject_id, epoch seconds, code,
-- hadm_id); the time NULL for a static row. Codes as MIMIC_IV_MEDS writes them (docs/meds.md):
--   GENDER//<gender> (static), MEDS_BIRTH;
--   HOSPITAL_ADMISSION//<admission type>//<admission location> at ADMITTIME;
--   HOSPITAL_DISCHARGE//<discharge location> at DISCHTIME, DIED for an admission with a death (DEATHTIME or
--     HOSPITAL_EXPIRE_FLAG: the extraction's label, whatever the location says), UNK without a location;
--   ED_REGISTRATION at EDREGTIME and ED_OUT at EDOUTTIME, without hadm_id and one per (subject, time): two
--     admissions of one emergency visit give one event each, as MIMIC_IV_MEDS's rows, which carry no hadm_id;
--   MEDS_DEATH, one per subject: its earliest in-hospital death time (DEATHTIME, else DISCHTIME with
--     HOSPITAL_EXPIRE_FLAG), else its date of death (PATIENTS.DOD, midnight), as MIMIC_IV_MEDS's coalesce; a date
--     of death is known at the end of its day at the earliest (known = DOD + 24 h), so that the extraction of a
--     window ending that day never sees a death that happens after it;
--   ICU_ADMISSION//<first care unit> at INTIME and ICU_DISCHARGE//<last care unit> at OUTTIME (none without
--     OUTTIME), UNK without a care unit.
SELECT subject_id, CAST(NULL AS DOUBLE) AS t, 'GENDER//' || gender AS code, CAST(NULL AS BIGINT) AS hadm_id,
       CAST(NULL AS DOUBLE) AS known
FROM x_patients WHERE reason IS NULL AND gender IS NOT NULL
UNION ALL
SELECT subject_id, birth_epoch, 'MEDS_BIRTH', NULL, NULL FROM x_patients WHERE reason IS NULL AND birth_epoch IS NOT NULL
UNION ALL
SELECT subject_id, admit_epoch,
       'HOSPITAL_ADMISSION//' || coalesce(admission_type, 'UNK') || '//' || coalesce(admission_location, 'UNK'), hadm_id,
       NULL
FROM x_admissions
UNION ALL
SELECT subject_id, disch_epoch,
       'HOSPITAL_DISCHARGE//' || CASE WHEN death_epoch IS NOT NULL THEN 'DIED' ELSE coalesce(discharge_location, 'UNK')
                                 END, hadm_id, NULL
FROM x_admissions WHERE disch_epoch IS NOT NULL
UNION ALL
SELECT DISTINCT subject_id, edreg_epoch, 'ED_REGISTRATION', CAST(NULL AS BIGINT), NULL FROM x_admissions
WHERE edreg_epoch IS NOT NULL
UNION ALL
SELECT DISTINCT subject_id, edout_epoch, 'ED_OUT', CAST(NULL AS BIGINT), NULL FROM x_admissions
WHERE edout_epoch IS NOT NULL
UNION ALL
SELECT coalesce(d.subject_id, p.subject_id), coalesce(d.death_epoch, p.dod_epoch), 'MEDS_DEATH', NULL,
       CASE WHEN d.death_epoch IS NULL THEN p.dod_epoch + 86400.0 END
FROM (SELECT subject_id, min(death_epoch) AS death_epoch FROM x_admissions WHERE death_epoch IS NOT NULL
      GROUP BY subject_id) d
FULL OUTER JOIN (SELECT subject_id, dod_epoch FROM x_patients WHERE reason IS NULL AND dod_epoch IS NOT NULL) p
  ON p.subject_id = d.subject_id
UNION ALL
SELECT subject_id, intime_epoch, 'ICU_ADMISSION//' || coalesce(first_careunit, 'UNK'), hadm_id, NULL
FROM x_icustays WHERE reason IS NULL
UNION ALL
SELECT subject_id, outtime_epoch, 'ICU_DISCHARGE//' || coalesce(last_careunit, 'UNK'), hadm_id, NULL
FROM x_icustays WHERE reason IS NULL AND outtime_epoch IS NOT NULL
