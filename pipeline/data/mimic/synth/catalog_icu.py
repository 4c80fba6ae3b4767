"""ICU catalog of the synthetic MIMIC-III (`pipeline.data.mimic.synth`): every ICU table but CHARTEVENTS.

Real MIMIC-III v1.4 itemids and labels of both ICU systems (CareVue and MetaVision) for
INPUTEVENTS (drips and boluses), OUTPUTEVENTS, DATETIMEEVENTS and PROCEDUREEVENTS_MV, the care
units of ICUSTAYS, and the D_ITEMS metadata of every ICU itemid the generator emits (the chart
concepts' included). Data, not logic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Input:
    """One INPUTEVENTS item: a drip (hourly rows while its state is on) or a bolus (Poisson)."""

    kind: str  # "vaso" (primary pressor, one per admission), "vaso2" (second pressor), "sed", "fluid", "insulin"
    cv: int  # CareVue ITEMID (INPUTEVENTS_CV)
    mv: int  # MetaVision ITEMID (INPUTEVENTS_MV)
    rate: float  # drips: typical rate (rateuom); boluses: events per hour
    rateuom: tuple[str, str]  # RATEUOM (CareVue, MetaVision); "" for boluses
    amountuom: str  # AMOUNTUOM
    per_kg: bool  # rate is per kg per minute (amount uses PATIENTWEIGHT)
    category: tuple[str, str, str]  # ORDERCATEGORYNAME, ORDERCOMPONENTTYPEDESCRIPTION, ORDERCATEGORYDESCRIPTION
    route: str  # CareVue ORIGINALROUTE


_DRIP = ("01-Drips", "Main order parameter", "Continuous Med")
INPUTS: tuple[Input, ...] = (
    Input("vaso", 30047, 221906, 0.08, ("mcgkgmin", "mcg/kg/min"), "mg", True, _DRIP, "Intravenous Infusion"),
    Input("vaso", 30120, 221906, 0.08, ("mcgkgmin", "mcg/kg/min"), "mg", True, _DRIP, "Intravenous Infusion"),
    Input("vaso", 30127, 221749, 1.0, ("mcgkgmin", "mcg/kg/min"), "mg", True, _DRIP, "Intravenous Infusion"),
    Input("vaso", 30043, 221662, 5.0, ("mcgkgmin", "mcg/kg/min"), "mg", True, _DRIP, "Intravenous Infusion"),
    Input("vaso2", 30051, 222315, 2.4, ("Uhr", "units/hour"), "units", False, _DRIP, "Intravenous Infusion"),
    Input("sed", 30131, 222168, 30.0, ("mcgkgmin", "mcg/kg/min"), "mg", True, _DRIP, "Intravenous Infusion"),
    Input("sed", 30118, 221744, 75.0, ("mcghr", "mcg/hour"), "mcg", False, _DRIP, "Intravenous Infusion"),
    Input("sed", 30124, 221668, 2.0, ("mghr", "mg/hour"), "mg", False, _DRIP, "Intravenous Infusion"),
    Input("fluid", 30018, 225158, 0.12, ("", ""), "ml", False,
          ("02-Fluids (Crystalloids)", "Main order parameter", "Continuous IV"), "Intravenous Infusion"),
    Input("fluid", 30013, 220949, 0.06, ("", ""), "ml", False,
          ("02-Fluids (Crystalloids)", "Main order parameter", "Continuous IV"), "Intravenous Infusion"),
    Input("insulin", 30045, 223258, 0.05, ("", ""), "units", False,
          ("06-Insulin (Non IV)", "Main order parameter", "Drug Push"), "Intravenous Push"),
)
VASO_PROBS = (0.4, 0.3, 0.18, 0.12)  # choice of the primary pressor among the four "vaso" rows
SED_PROBS = (0.7, 0.5, 0.2)  # probability that a ventilated admission gets each "sed" drip

# OUTPUTEVENTS: (CareVue ITEMID, MetaVision ITEMID, events per ICU hour, median mL; 0 rate = hourly urine)
OUTPUTS: tuple[tuple[int, int, float, float], ...] = ((40055, 226559, 0.0, 70.0), (40069, 226560, 0.02, 300.0),
                                                       (40054, 226579, 0.03, 200.0))
# DATETIMEEVENTS: (ITEMID, events per ICU hour, needs "art" or "", VALUEUOM, value = "insert" date or "recent" datetime)
DTEVENTS: dict[str, tuple[tuple[int, float, str, str, str], ...]] = {
    "carevue": ((5684, 1 / 12, "art", "Date", "insert"), (5685, 1 / 24, "", "Date", "insert"),
                (3411, 1 / 24, "", "Date", "recent")),
    "metavision": ((225754, 1 / 12, "", "Date", "insert"), (224280, 1 / 12, "art", "Date", "insert"),
                   (224288, 1 / 12, "art", "Date", "insert"), (224279, 1 / 48, "art", "Date and Time", "recent")),
}
# PROCEDUREEVENTS_MV: name -> (ITEMID, ORDERCATEGORYNAME, ORDERCATEGORYDESCRIPTION, LOCATION, LOCATIONCATEGORY)
PROCEDURES: dict[str, tuple[int, str, str, str, str]] = {
    "vent": (225792, "Ventilation", "Task", "", ""),
    "art": (225752, "Invasive Lines", "Task", "Left Radial", "Invasive Arterial"),
    "iv": (224277, "Peripheral Lines", "Task", "Left Antecube", "Peripheral"),
    "xray": (225459, "Imaging", "Electrolytes", "", ""),
    "culture": (225401, "Cultures", "Electrolytes", "", ""),
}
CAREUNITS = {  # FIRST_CAREUNIT by admission type (value, probability)
    "EMERGENCY": (("MICU", 0.5), ("SICU", 0.15), ("CCU", 0.15), ("TSICU", 0.12), ("CSRU", 0.08)),
    "URGENT": (("MICU", 0.4), ("CCU", 0.3), ("CSRU", 0.3)),
    "ELECTIVE": (("CSRU", 0.6), ("SICU", 0.4)),
    "NEWBORN": (("NICU", 1.0),),
}

# D_ITEMS metadata: ITEMID|LABEL (CareVue) or ITEMID|LABEL|ABBREVIATION|CATEGORY|UNITNAME|PARAM_TYPE (MetaVision)
_ITEM_TEXT = """
211|Heart Rate
646|SpO2
618|Respiratory Rate
455|NBP [Systolic]
8441|NBP [Diastolic]
456|NBP Mean
51|Arterial BP [Systolic]
8368|Arterial BP [Diastolic]
52|Arterial BP Mean
678|Temperature F
676|Temperature C
113|CVP
3420|FIO2
615|Resp Rate (Total)
762|Admit Wt
581|Previous WeightF
5815|HR Alarm [Low]
8549|HR Alarm [High]
5820|SpO2 Alarm [Low]
8554|SpO2 Alarm [High]
5819|Resp Alarm [Low]
8553|Resp Alarm [High]
5817|NBP Alarm [Low]
8551|NBP Alarm [High]
184|Eye Opening
454|Motor Response
723|Verbal Response
432|Level of Conscious
1337|Riker-SAS Scale
479|Orientation
212|Heart Rhythm
467|O2 Delivery Device
128|Code Status
720|Ventilator Mode
617|Respiratory Pattern
161|Ectopy Type
159|Ectopy Frequency
550|Precautions
31|Activity
637|Side Rails
674|Temp. Site
1484|Risk for Falls
1125|Service Type
1703|Health Care Proxy
220045|Heart Rate|HR|Routine Vital Signs|bpm|Numeric
220277|O2 saturation pulseoxymetry|SpO2|Respiratory|%|Numeric
220210|Respiratory Rate|RR|Respiratory|insp/min|Numeric
220179|Non Invasive Blood Pressure systolic|NBPs|Routine Vital Signs|mmHg|Numeric
220180|Non Invasive Blood Pressure diastolic|NBPd|Routine Vital Signs|mmHg|Numeric
220181|Non Invasive Blood Pressure mean|NBPm|Routine Vital Signs|mmHg|Numeric
220050|Arterial Blood Pressure systolic|ABPs|Routine Vital Signs|mmHg|Numeric
220051|Arterial Blood Pressure diastolic|ABPd|Routine Vital Signs|mmHg|Numeric
220052|Arterial Blood Pressure mean|ABPm|Routine Vital Signs|mmHg|Numeric
223761|Temperature Fahrenheit|Temperature F|Routine Vital Signs|?F|Numeric
223762|Temperature Celsius|Temperature C|Routine Vital Signs|?C|Numeric
220074|Central Venous Pressure|CVP|Hemodynamics|mmHg|Numeric
223835|Inspired O2 Fraction|FiO2|Respiratory|None|Numeric
224690|Respiratory Rate (Total)|Respiratory Rate (Total)|Respiratory|insp/min|Numeric
226512|Admission Weight (Kg)|Admission Weight (Kg)|General|kg|Numeric
220047|Heart Rate Alarm - Low|HR Alarm - Low|Alarms|bpm|Numeric
220046|Heart rate Alarm - High|HR Alarm - High|Alarms|bpm|Numeric
223770|O2 Saturation Pulseoxymetry Alarm - Low|SpO2 Alarm - Low|Alarms|%|Numeric
223769|O2 Saturation Pulseoxymetry Alarm - High|SpO2 Alarm - High|Alarms|%|Numeric
224162|Resp Alarm - Low|Resp Alarm - Low|Alarms|insp/min|Numeric
224161|Resp Alarm - High|Resp Alarm - High|Alarms|insp/min|Numeric
223752|Non-Invasive Blood Pressure Alarm - Low|NBP Alarm - Low|Alarms|mmHg|Numeric
223751|Non-Invasive Blood Pressure Alarm - High|NBP Alarm - High|Alarms|mmHg|Numeric
220739|GCS - Eye Opening|Eye Opening|Neurological||Text
223901|GCS - Motor Response|Motor Response|Neurological||Text
223900|GCS - Verbal Response|Verbal Response|Neurological||Text
226104|Level of Consciousness|Level of Consciousness|Neurological||Text
223753|Riker-SAS Scale|Riker-SAS Scale|Pain/Sedation||Text
223898|Orientation|Orientation|Neurological||Text
220048|Heart Rhythm|Heart Rhythm|Routine Vital Signs||Text
226732|O2 Delivery Device(s)|O2 Delivery Device(s)|Respiratory||Text
223758|Code Status|Code Status|General||Text
223849|Ventilator Mode|Ventilator Mode|Respiratory||Text
224650|Ectopy Type 1|Ectopy Type 1|Routine Vital Signs||Text
224651|Ectopy Frequency 1|Ectopy Frequency 1|Routine Vital Signs||Text
224084|Activity|Activity|Treatments||Text
224642|Temperature Site|Temp Site|Routine Vital Signs||Text
224080|Head of Bed|HOB|Treatments||Text
224082|Turn|Turn|Treatments||Text
227969|Safety Measures_U_1|Safety Measures_U_1|Restraint/Support Systems||Text
224641|Alarms On|Alarms On|Alarms||Checkbox
227368|20 Gauge Dressing Occlusive|20 Gauge Dressing Occlusive|Access Lines - Peripheral||Checkbox
30047|Levophed
30120|Levophed-k
30127|Neosynephrine
30043|Dopamine
30051|Vasopressin
30131|Propofol
30118|Fentanyl
30124|Midazolam
30018|.9% Normal Saline
30013|D5W
30045|Insulin
221906|Norepinephrine|Norepinephrine|Medications|mg|Solution
221749|Phenylephrine|Phenylephrine|Medications|mg|Solution
221662|Dopamine|Dopamine|Medications|mg|Solution
222315|Vasopressin|Vasopressin|Medications|units|Solution
222168|Propofol|Propofol|Medications|mg|Solution
221744|Fentanyl|Fentanyl|Medications|mg|Solution
221668|Midazolam (Versed)|Midazolam (Versed)|Medications|mg|Solution
225158|NaCl 0.9%|NaCl 0.9%|Fluids/Intake|mL|Solution
220949|Dextrose 5%|Dextrose 5%|Fluids/Intake|mL|Solution
223258|Insulin - Regular|Insulin - Regular|Medications|units|Solution
40055|Urine Out Foley
40069|Urine Out Void
40054|Stool Out Stool
226559|Foley|Foley|Output|mL|Numeric
226560|Void|Void|Output|mL|Numeric
226579|Stool|Stool|Output|mL|Numeric
5684|INV#1 Dsg Change [MM]
5685|INV#2 Dsg Change [MM]
3411|Equip Change [MM]
225754|20 Gauge Insertion Date|20 Gauge Insertion Date|Access Lines - Peripheral||Date time
224280|Multi Lumen Insertion Date|Multi Lumen Insertion Date|Access Lines - Invasive||Date time
224288|Arterial line Insertion Date|Arterial line Insertion Date|Access Lines - Invasive||Date time
224279|Multi Lumen Dressing Change|Multi Lumen Dressing Change|Access Lines - Invasive||Date time
225792|Invasive Ventilation|Invasive Ventilation|2-Ventilation|None|Process
225752|Arterial Line|Arterial Line|Access Lines - Invasive|None|Process
224277|18 Gauge|18 Gauge|Access Lines - Peripheral|None|Process
225459|Chest X-Ray|Chest X-Ray|5-Imaging|None|Process
225401|Blood Cultured|Blood Cultured|6-Cultures|None|Process
"""
# itemid -> (LABEL, ABBREVIATION, CATEGORY, UNITNAME, PARAM_TYPE); "" = NULL
ITEM_META: dict[int, tuple[str, str, str, str, str]] = {
    int(p[0]): tuple((p[1:] + [""] * 5)[:5])
    for p in (line.split("|") for line in _ITEM_TEXT.strip().splitlines())
}
