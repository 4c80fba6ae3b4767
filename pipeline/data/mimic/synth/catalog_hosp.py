"""Hospital catalog of the synthetic MIMIC-III (`pipeline.data.mimic.synth`): the tables outside the ICU.

Real MIMIC-III v1.4 values for LABEVENTS (items, panels and their observation model, ``Lab``),
PRESCRIPTIONS, MICROBIOLOGYEVENTS, DIAGNOSES_ICD and ADMISSIONS (reasons, locations and
demographics with their probabilities). Data, not logic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Lab:
    """One LABEVENTS item and its observation model."""

    itemid: int  # ITEMID (D_LABITEMS)
    label: str  # D_LABITEMS.LABEL
    category: str  # D_LABITEMS.CATEGORY
    loinc: str  # D_LABITEMS.LOINC_CODE ("" = NULL)
    uom: str  # VALUEUOM ("" = NULL)
    panel: str  # panel drawn together (key of PANELS)
    mean: float  # value at z = 0 (log of it when log)
    sd: float  # value change per unit of z (log scale when log)
    load: float  # change of z per unit of severity
    dec: int  # decimals
    ref: tuple[float, float]  # reference range: outside it FLAG = 'abnormal'
    log: bool = False  # value = exp(mean + sd z)
    fluid: str = "Blood"  # D_LABITEMS.FLUID


def _lab(itemid, label, category, loinc, uom, panel, mean, sd, load, dec, ref, log=False, fluid="Blood") -> Lab:
    return Lab(itemid, label, category, loinc, uom, panel, math.log(mean) if log else mean, sd, load, dec, ref, log,
               fluid)


LABS: tuple[Lab, ...] = (
    _lab(50912, "Creatinine", "Chemistry", "2160-0", "mg/dL", "chem", 1.0, 0.55, 0.45, 1, (0.5, 1.2), True),
    _lab(50983, "Sodium", "Chemistry", "2951-2", "mEq/L", "chem", 139, 4, -0.1, 0, (133, 145)),
    _lab(50971, "Potassium", "Chemistry", "2823-3", "mEq/L", "chem", 4.1, 0.5, 0.15, 1, (3.3, 5.1)),
    _lab(50882, "Bicarbonate", "Chemistry", "1963-8", "mEq/L", "chem", 25, 4, -0.45, 0, (22, 32)),
    _lab(50902, "Chloride", "Chemistry", "2075-0", "mEq/L", "chem", 104, 5, 0.05, 0, (96, 108)),
    _lab(51006, "Urea Nitrogen", "Chemistry", "3094-0", "mg/dL", "chem", 22, 0.6, 0.4, 0, (6, 20), True),
    _lab(50931, "Glucose", "Chemistry", "2345-7", "mg/dL", "chem", 125, 0.3, 0.25, 0, (70, 105), True),
    _lab(50868, "Anion Gap", "Chemistry", "1863-0", "mEq/L", "chem", 13, 3, 0.4, 0, (8, 20)),
    _lab(50960, "Magnesium", "Chemistry", "2601-3", "mg/dL", "chem", 2.0, 0.3, 0.0, 1, (1.6, 2.6)),
    _lab(50893, "Calcium, Total", "Chemistry", "2000-8", "mg/dL", "chem", 8.5, 0.7, -0.2, 1, (8.4, 10.3)),
    _lab(50970, "Phosphate", "Chemistry", "2777-1", "mg/dL", "chem", 3.5, 0.3, 0.2, 1, (2.7, 4.5), True),
    _lab(51301, "White Blood Cells", "Hematology", "804-5", "K/uL", "cbc", 9.5, 0.4, 0.35, 1, (4.0, 11.0), True),
    _lab(51222, "Hemoglobin", "Hematology", "718-7", "g/dL", "cbc", 10.5, 1.8, -0.25, 1, (12, 16)),
    _lab(51221, "Hematocrit", "Hematology", "4544-3", "%", "cbc", 31, 5, -0.25, 1, (36, 48)),
    _lab(51265, "Platelet Count", "Hematology", "777-3", "K/uL", "cbc", 200, 0.5, -0.35, 0, (150, 440), True),
    _lab(51248, "MCH", "Hematology", "785-6", "pg", "cbc", 30, 2, 0.0, 1, (27, 32)),
    _lab(51249, "MCHC", "Hematology", "786-4", "%", "cbc", 33.5, 1.2, 0.0, 1, (31, 35)),
    _lab(51250, "MCV", "Hematology", "787-2", "fL", "cbc", 90, 6, 0.0, 0, (82, 98)),
    _lab(51279, "Red Blood Cells", "Hematology", "789-8", "m/uL", "cbc", 3.5, 0.6, -0.2, 2, (4.2, 5.4)),
    _lab(51277, "RDW", "Hematology", "788-0", "%", "cbc", 15, 1.8, 0.2, 1, (10.5, 15.5)),
    _lab(50800, "SPECIMEN TYPE", "BLOOD GAS", "", "", "abg", 0, 1, 0.0, 0, (0, 0), fluid="BLOOD"),
    _lab(50820, "pH", "Blood Gas", "11558-4", "units", "abg", 7.39, 0.06, -0.45, 2, (7.35, 7.45)),
    _lab(50818, "pCO2", "Blood Gas", "11557-6", "mm Hg", "abg", 41, 8, 0.1, 0, (35, 45)),
    _lab(50821, "pO2", "Blood Gas", "11556-8", "mm Hg", "abg", 110, 0.4, -0.2, 0, (85, 105), True),
    _lab(50813, "Lactate", "Blood Gas", "32693-4", "mmol/L", "abg", 1.6, 0.5, 0.6, 1, (0.5, 2.0), True),
    _lab(50802, "Base Excess", "Blood Gas", "11555-0", "mEq/L", "abg", 0, 4, -0.45, 0, (-2, 3)),
    _lab(50804, "Calculated Total CO2", "Blood Gas", "34728-6", "mEq/L", "abg", 25, 4, -0.4, 0, (21, 30)),
    _lab(50885, "Bilirubin, Total", "Chemistry", "1975-2", "mg/dL", "lft", 0.8, 0.8, 0.35, 1, (0.0, 1.5), True),
    _lab(50861, "Alanine Aminotransferase (ALT)", "Chemistry", "1742-6", "IU/L", "lft", 30, 0.8, 0.2, 0, (0, 40), True),
    _lab(50878, "Asparate Aminotransferase (AST)", "Chemistry", "1920-8", "IU/L", "lft", 35, 0.8, 0.25, 0, (0, 40),
         True),
    _lab(50863, "Alkaline Phosphatase", "Chemistry", "6768-6", "IU/L", "lft", 90, 0.5, 0.0, 0, (39, 117), True),
    _lab(50862, "Albumin", "Chemistry", "1751-7", "g/dL", "lft", 3.0, 0.6, -0.35, 1, (3.4, 5.4)),
    _lab(51237, "INR(PT)", "Hematology", "5895-7", "", "coag", 1.3, 0.3, 0.3, 1, (0.9, 1.1), True),
    _lab(51274, "PT", "Hematology", "5902-2", "sec", "coag", 14, 0.2, 0.3, 1, (10.4, 13.4), True),
    _lab(51275, "PTT", "Hematology", "3173-2", "sec", "coag", 32, 0.3, 0.2, 1, (22, 35), True),
)
# panel -> (draws per hour at severity 0, log rate per unit of severity, rate factor while ventilated)
PANELS: dict[str, tuple[float, float, float]] = {
    "chem": (1 / 10, 0.3, 1.0), "cbc": (1 / 12, 0.3, 1.0), "abg": (1 / 30, 0.9, 3.0),
    "lft": (1 / 48, 0.3, 1.0), "coag": (1 / 24, 0.4, 1.0),
}
LAB_TEXT = ("HOLD", "See Comments", "UNABLE TO REPORT", "ERROR")  # non-numeric lab VALUEs (VALUENUM empty)

# PRESCRIPTIONS: (DRUG_TYPE, DRUG, POE, GENERIC, FORMULARY_DRUG_CD, GSN, NDC, PROD_STRENGTH, DOSE_VAL_RX,
#                 DOSE_UNIT_RX, FORM_VAL_DISP, FORM_UNIT_DISP, ROUTE), weight, log weight per unit of severity
DRUGS: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("MAIN", "Potassium Chloride", "Potassium Chloride", "Potassium Chloride", "KCL20P", "001262", "00456066270",
      "20mEq Packet", "40", "mEq", "2", "PKT", "PO"), 5.3, 0.0),
    (("MAIN", "Furosemide", "Furosemide", "Furosemide", "FURO40I", "008205", "00517570425", "40mg/4mL Vial",
      "40", "mg", "1", "VIAL", "IV"), 3.5, 0.2),
    (("MAIN", "Insulin", "Insulin", "Insulin", "INSULIN", "027413", "0",
      "Dummy Pkg for POE pump and PHA SS ordering", "0", "UNIT", "0", "VIAL", "SC"), 3.0, 0.1),
    (("BASE", "D5W", "", "", "MORPD5W", "", "0", "100mL Bottle", "100", "mL", "1", "BTL", "IV DRIP"), 4.4, 0.3),
    (("BASE", "NS", "", "", "METRBASE", "", "0", "100ml", "100", "mL", "100", "mL", "IV"), 3.6, 0.3),
    (("MAIN", "Sodium Chloride 0.9%  Flush", "Sodium Chloride 0.9%  Flush", "Sodium Chloride 0.9%  Flush",
      "NACLFLUSH", "", "0", "Syringe", "3", "mL", "0.6", "SYR", "IV"), 2.1, 0.0),
    (("MAIN", "Heparin", "Heparin", "Heparin Sodium", "HEPA5I", "006549", "63323026201",
      "5000 Units / mL- 1mL Vial", "5000", "UNIT", "1", "mL", "SC"), 1.5, 0.0),
    (("MAIN", "Acetaminophen", "Acetaminophen", "Acetaminophen", "ACET325", "004489", "00182844789",
      "325mg Tablet", "325-650", "mg", "1-2", "TAB", "PO"), 1.6, -0.2),
    (("MAIN", "Pantoprazole", "Pantoprazole", "Pantoprazole", "PANT40", "027462", "00008084199", "40mg Tablet",
      "40", "mg", "1", "TAB", "PO"), 1.2, 0.2),
    (("MAIN", "Docusate Sodium", "Docusate Sodium", "Docusate Sodium", "DOCU100", "003009", "00904224461",
      "100mg Capsule", "100", "mg", "1", "CAP", "PO"), 0.9, -0.3),
    (("MAIN", "Senna", "Senna", "Senna", "SENN187", "019964", "00904516561", "1 Tablet", "1", "TAB", "1", "TAB",
      "PO"), 1.0, -0.3),
    (("MAIN", "Metoprolol Tartrate", "Metoprolol Tartrate", "Metoprolol Tartrate", "METO25", "050631",
      "51079025520", "25mg Tablet", "12.5", "mg", "0.5", "TAB", "PO"), 1.4, -0.2),
    (("MAIN", "Magnesium Sulfate", "Magnesium Sulfate", "Magnesium Sulfate", "MAG2PM", "016546", "00409672924",
      "2 g / 50 mL Premix Bag", "2", "gm", "1", "BAG", "IV"), 2.1, 0.0),
    (("MAIN", "Vancomycin", "", "", "VANC1F", "043952", "00338355248", "1g Frozen Bag", "1000", "mg", "1", "BAG",
      "IV"), 1.1, 0.8),
    (("MAIN", "Piperacillin-Tazobactam", "", "", "ZOSY4.5I", "021187", "00206885516", "4.5 g Vial", "4.5", "gm",
      "1", "VIAL", "IV"), 0.8, 0.8),
    (("MAIN", "Norepinephrine", "", "", "LEVO4I", "028633", "00703115303", "4mg/4mL Amp", "8", "mg", "2", "AMP",
      "IV DRIP"), 0.0, 0.0),  # only while a pressor runs (weight set by the generator)
)

SPECIMENS = ((70012, "BLOOD CULTURE", 0.45, -0.5), (70079, "URINE", 0.3, 0.0), (70062, "SPUTUM", 0.2, 0.5),
             (70091, "MRSA SCREEN", 0.05, -1.0))  # (SPEC_ITEMID, SPEC_TYPE_DESC, share, logit shift of positivity)
ORGANISMS = ((80002, "ESCHERICHIA COLI"), (80023, "STAPH AUREUS COAG +"), (80004, "KLEBSIELLA PNEUMONIAE"),
             (80026, "PSEUDOMONAS AERUGINOSA"), (80155, "STAPHYLOCOCCUS, COAGULASE NEGATIVE"), (80075, "YEAST"))
ANTIBIOTICS = ((90012, "GENTAMICIN"), (90008, "TRIMETHOPRIM/SULFA"), (90028, "CEFEPIME"), (90013, "TOBRAMYCIN"),
               (90017, "CEFTAZIDIME"), (90019, "CIPROFLOXACIN"), (90029, "MEROPENEM"), (90018, "CEFTRIAXONE"))

# DIAGNOSES_ICD chronic codes and their weight in the chronic burden
ICD_CHRONIC = (("4019", 1.0), ("4280", 0.6), ("25000", 0.6), ("2724", 0.6), ("41401", 0.5), ("496", 0.3),
               ("5859", 0.3), ("2449", 0.3), ("311", 0.25), ("2859", 0.4), ("V5861", 0.3))
# ADMISSIONS.DIAGNOSIS text and the primary ICD-9 code it maps to, by admission type
REASONS = {
    "EMERGENCY": (("SEPSIS", "0389"), ("PNEUMONIA", "486"), ("CONGESTIVE HEART FAILURE", "42823"),
                  ("GASTROINTESTINAL BLEED", "5789"), ("STROKE/TIA", "43491"), ("ALTERED MENTAL STATUS", "78097"),
                  ("CHEST PAIN", "78650"), ("RESPIRATORY DISTRESS", "51881")),
    "URGENT": (("CORONARY ARTERY DISEASE", "41401"), ("AORTIC STENOSIS", "4241"), ("SUBDURAL HEMATOMA", "4321")),
    "ELECTIVE": (("CORONARY ARTERY DISEASE\\CORONARY ARTERY BYPASS GRAFT /SDA", "41401"),
                 ("AORTIC STENOSIS\\AORTIC VALVE REPLACEMENT /SDA", "4241"), ("BRAIN MASS", "2252")),
    "NEWBORN": (("NEWBORN", "V3000"),),
}
ICD_ACUTE = ("99592", "78552", "51881", "5849", "2761", "5990", "42731")  # severe sepsis, shock, resp. failure, AKI ...
ICD_NEWBORN = ("V053", "V290", "7742")

ADM_LOCATIONS = {  # ADMISSION_LOCATION by admission type (value, probability)
    "EMERGENCY": (("EMERGENCY ROOM ADMIT", 0.65), ("TRANSFER FROM HOSP/EXTRAM", 0.22),
                  ("CLINIC REFERRAL/PREMATURE", 0.1), ("TRANSFER FROM SKILLED NUR", 0.03)),
    "URGENT": (("TRANSFER FROM HOSP/EXTRAM", 0.6), ("PHYS REFERRAL/NORMAL DELI", 0.2),
               ("CLINIC REFERRAL/PREMATURE", 0.2)),
    "ELECTIVE": (("PHYS REFERRAL/NORMAL DELI", 0.9), ("CLINIC REFERRAL/PREMATURE", 0.1)),
    "NEWBORN": (("PHYS REFERRAL/NORMAL DELI", 0.7), ("CLINIC REFERRAL/PREMATURE", 0.3)),
}
DISCHARGE_LOCATIONS = (("HOME", 0.3), ("HOME HEALTH CARE", 0.25), ("SNF", 0.25), ("REHAB/DISTINCT PART HOSP", 0.12),
                       ("LONG TERM CARE HOSPITAL", 0.04), ("HOSPICE-HOME", 0.02), ("DISC-TRAN CANCER/CHLDRN H", 0.02))
INSURANCE_65 = (("Medicare", 0.85), ("Private", 0.12), ("Government", 0.03))
INSURANCE = (("Private", 0.55), ("Medicaid", 0.25), ("Medicare", 0.15), ("Government", 0.05))
LANGUAGES = (("ENGL", 0.8), ("SPAN", 0.1), ("RUSS", 0.04), ("PTUN", 0.03), ("CAPE", 0.03))
RELIGIONS = (("CATHOLIC", 0.4), ("NOT SPECIFIED", 0.15), ("UNOBTAINABLE", 0.12), ("PROTESTANT QUAKER", 0.12),
             ("JEWISH", 0.1), ("OTHER", 0.06), ("BUDDHIST", 0.02), ("MUSLIM", 0.03))
MARITAL = (("MARRIED", 0.47), ("SINGLE", 0.25), ("WIDOWED", 0.14), ("DIVORCED", 0.07), ("SEPARATED", 0.01),
           ("UNKNOWN (DEFAULT)", 0.01), ("", 0.05))
ETHNICITIES = (("WHITE", 0.7), ("BLACK/AFRICAN AMERICAN", 0.09), ("UNKNOWN/NOT SPECIFIED", 0.08),
               ("HISPANIC OR LATINO", 0.03), ("HISPANIC/LATINO - PUERTO RICAN", 0.02), ("ASIAN", 0.03),
               ("OTHER", 0.03), ("UNABLE TO OBTAIN", 0.02))
