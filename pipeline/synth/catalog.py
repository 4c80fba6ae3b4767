"""Static catalog of the synthetic MIMIC-III generator (`pipeline.synth`).

Real MIMIC-III v1.4 itemids, labels and value strings of both ICU systems (CareVue and
MetaVision) for the concepts the generator emits, with the parameters of their observation
model. Weights are relative charting frequencies (roughly the demo's rows per 100 stays).

One concern over ~400 lines: a data table of the generator (items and their value models), not logic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Concept:
    """One charted concept with its CareVue and MetaVision itemids."""

    name: str  # concept key (the per-admission random effect is shared by both systems)
    cv: int  # CareVue ITEMID (0: not charted in CareVue)
    mv: int  # MetaVision ITEMID (0: not charted in MetaVision)
    w: tuple[float, float]  # relative charting weight (CareVue, MetaVision)
    kind: str = "num"  # "num": VALUENUM + VALUE; "text": VALUE from cats (VALUENUM from nums)
    load: float = 0.0  # change of z per unit of severity (0: nuisance)
    re: float = 0.6  # sd of the per-admission offset of z
    noise: float = 0.7  # sd of the per-measurement noise of z
    mean: float = 0.0  # num: value at z = 0 (log scale when log)
    sd: float = 1.0  # num: value change per unit of z
    dec: int = 0  # num: decimals (negative: round to tens)
    lo: float = -1e9  # num: lower clip
    hi: float = 1e9  # num: upper clip
    uom: tuple[str, str] = ("", "")  # VALUEUOM (CareVue, MetaVision)
    cats: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # text: categories by increasing z
    probs: tuple[float, ...] = ()  # text: category probabilities at severity 0
    nums: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # text: VALUENUM per category
    needs: str = ""  # "" always, "vent": while ventilated, "art": with an arterial line
    vent_cat: int = -1  # text: category forced while ventilated (-1: none)
    flag: str = ""  # text: admission flag ("af", "dnr") that forces the last category
    gamma: float = 0.0  # log charting rate per unit of severity
    hourly: bool = False  # charted on the hour most of the time (vital signs)


def _n(name, cv, mv, w, mean, sd, load, lo, hi, uom, dec=0, **kw) -> Concept:
    return Concept(name, cv, mv, w, "num", load, mean=mean, sd=sd, lo=lo, hi=hi, uom=uom, dec=dec, **kw)


def _t(name, cv, mv, w, cats_cv, cats_mv, probs, load=0.0, **kw) -> Concept:
    kw.setdefault("re", 0.6 if load else 0.9)
    kw.setdefault("noise", 0.7 if load else 0.5)
    return Concept(name, cv, mv, w, "text", load, cats=(cats_cv, cats_mv), probs=probs, **kw)


_GCS_V = (("1 No Response", "2 Incomp sounds", "3 Inapprop words", "4 Confused", "5 Oriented", "1.0 ET/Trach"),
          ("No Response", "Incomprehensible sounds", "Inappropriate Words", "Confused", "Oriented", "No Response-ETT"))
_GCS_M = (("1 No Response", "2 Abnorm extensn", "3 Abnorm flexion", "4 Flex-withdraws", "5 Localizes Pain", "6 Obeys Commands"),
          ("No response", "Abnormal extension", "Abnormal Flexion", "Flex-withdraws", "Localizes Pain", "Obeys Commands"))
_SAS = ("Unarousable", "Very Sedated", "Sedated", "Calm/Cooperative", "Agitated", "Very Agitated")
_VITAL = dict(hourly=True, gamma=0.05)

CHART: tuple[Concept, ...] = (
    # vital signs and other numeric items carrying signal
    _n("hr", 211, 220045, (74, 81), 86, 14, 0.5, 30, 220, ("BPM", "bpm"), **_VITAL),
    _n("spo2", 646, 220277, (73, 80), 97, 2.0, -0.45, 50, 100, ("%", "%"), **_VITAL),
    _n("rr", 618, 220210, (70, 80), 19, 4.5, 0.45, 4, 70, ("BPM", "insp/min"), **_VITAL),
    _n("nbps", 455, 220179, (32, 49), 121, 18, -0.4, 40, 250, ("mmHg", "mmHg"), **_VITAL),
    _n("nbpd", 8441, 220180, (32, 49), 62, 12, -0.25, 15, 150, ("mmHg", "mmHg"), **_VITAL),
    _n("nbpm", 456, 220181, (32, 49), 80, 12, -0.4, 20, 180, ("mmHg", "mmHg"), **_VITAL),
    _n("abps", 51, 220050, (45, 30), 120, 18, -0.45, 40, 250, ("mmHg", "mmHg"), needs="art", **_VITAL),
    _n("abpd", 8368, 220051, (45, 30), 60, 10, -0.3, 15, 150, ("mmHg", "mmHg"), needs="art", **_VITAL),
    _n("abpm", 52, 220052, (45, 30), 78, 11, -0.45, 20, 180, ("mmHg", "mmHg"), needs="art", **_VITAL),
    _n("tempf", 678, 223761, (17, 20), 98.5, 1.1, 0.25, 88, 107, ("Deg. F", "?F"), dec=1, gamma=0.05),
    _n("tempc", 676, 223762, (10, 3), 36.9, 0.6, 0.25, 31, 42, ("Deg. C", "?C"), dec=1),
    _n("cvp", 113, 220074, (29, 9), 10, 4.5, 0.15, 0, 35, ("mmHg", "mmHg")),
    _n("fio2", 3420, 223835, (20, 15), 50, 15, 0.5, 21, 100, ("%", ""), needs="vent"),
    _n("rrtot", 615, 224690, (15, 15), 20, 5, 0.4, 4, 60, ("BPM", "insp/min"), needs="vent"),
    # numeric nuisance: weights and alarm limits (stable per admission)
    _n("weight", 762, 226512, (1, 1), 80, 18, 0.0, 35, 250, ("kg", "kg"), dec=1, re=1.0, noise=0.02),
    _n("prevweight", 581, 0, (34, 0), 80, 18, 0.0, 35, 250, ("kg", ""), dec=1, re=1.0, noise=0.05),
    _n("hr_lo", 5815, 220047, (40, 25), 50, 5, 0.0, 30, 80, ("BPM", "bpm"), dec=-1, re=1.0, noise=0.15),
    _n("hr_hi", 8549, 220046, (40, 25), 120, 10, 0.0, 90, 160, ("BPM", "bpm"), dec=-1, re=1.0, noise=0.15),
    _n("spo2_lo", 5820, 223770, (40, 25), 90, 2, 0.0, 80, 95, ("%", "%"), re=1.0, noise=0.15),
    _n("spo2_hi", 8554, 223769, (40, 25), 100, 0.3, 0.0, 99, 100, ("%", "%"), re=1.0, noise=0.15),
    _n("rr_lo", 5819, 224162, (36, 24), 8, 1.5, 0.0, 4, 12, ("BPM", "insp/min"), re=1.0, noise=0.15),
    _n("rr_hi", 8553, 224161, (36, 24), 30, 4, 0.0, 20, 40, ("BPM", "insp/min"), re=1.0, noise=0.15),
    _n("nbp_lo", 5817, 223752, (35, 20), 90, 8, 0.0, 70, 110, ("mmHg", "mmHg"), dec=-1, re=1.0, noise=0.15),
    _n("nbp_hi", 8551, 223751, (35, 20), 160, 12, 0.0, 130, 200, ("mmHg", "mmHg"), dec=-1, re=1.0, noise=0.15),
    # text items carrying signal
    _t("gcs_eye", 184, 220739, (20, 20), ("1 No Response", "2 To pain", "3 To speech", "4 Spontaneously"),
       ("No Response", "To Pain", "To Speech", "Spontaneously"), (0.12, 0.1, 0.2, 0.58), -0.6,
       nums=((1, 2, 3, 4), (1, 2, 3, 4)), gamma=0.1),
    _t("gcs_motor", 454, 223901, (20, 20), *_GCS_M, (0.12, 0.02, 0.03, 0.1, 0.15, 0.58), -0.6,
       nums=((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6)), gamma=0.1),
    _t("gcs_verbal", 723, 223900, (20, 20), *_GCS_V, (0.08, 0.05, 0.03, 0.25, 0.59, 0.0), -0.6,
       nums=((1, 2, 3, 4, 5, 1), (1, 2, 3, 4, 5, 1)), vent_cat=5, gamma=0.1),
    _t("consc", 432, 226104, (21, 21),
       ("Unresponsive", "Arouse to Stimul", "Lethargic", "Arouse to Voice", "Sleeping", "Alert"),
       ("Unresponsive", "Arouse to Pain", "Arouse to Stimulation", "Lethargic", "Arouse to Voice", "Alert"),
       (0.06, 0.05, 0.05, 0.1, 0.14, 0.6), -0.55),
    _t("sas", 1337, 223753, (22, 25), _SAS, _SAS, (0.06, 0.04, 0.15, 0.65, 0.08, 0.02), -0.4,
       nums=((), (1, 2, 3, 4, 5, 6))),
    _t("orient", 479, 223898, (20, 20),
       ("Disoriented", "Oriented x 1", "Oriented x 2", "Oriented x 3", "Unable to Assess"),
       ("Disoriented", "Oriented x1", "Oriented x2", "Oriented x3", "Unable to Assess"),
       (0.05, 0.08, 0.08, 0.79, 0.0), -0.45, vent_cat=4),
    _t("rhythm", 212, 220048, (71, 74), ("Sinus Brady", "Normal Sinus", "Sinus Tachy", "Atrial Fib"),
       ("SB (Sinus Bradycardia)", "SR (Sinus Rhythm)", "ST (Sinus Tachycardia)", "AF (Atrial Fibrillation)"),
       (0.08, 0.7, 0.22, 0.0), 0.5, flag="af", hourly=True),
    _t("o2dev", 467, 226732, (8, 19),
       ("None", "Nasal Cannula", "Face Tent", "Aerosol-Cool", "Hi Flow Neb", "Non-Rebreather", "Ventilator"),
       ("None", "Nasal cannula", "Face tent", "Aerosol-cool", "High flow neb", "Non-rebreather", "Endotracheal tube"),
       (0.25, 0.45, 0.1, 0.08, 0.07, 0.05, 0.0), 0.6, vent_cat=6),
    _t("vmode", 720, 223849, (10, 8), ("CPAP+PS", "SIMV+PS", "Assist Control"), ("CPAP/PSV", "CMV/ASSIST", "CMV/ASSIST/AutoFlow"),
       (0.3, 0.15, 0.55), 0.5, needs="vent"),
    _t("code", 128, 223758, (70, 2), ("Full Code", "Do Not Resuscita"), ("Full code", "DNR / DNI"), (1.0, 0.0),
       flag="dnr"),
    # text nuisance
    _t("ectopy", 161, 224650, (69, 70), ("None", "PVC's", "PAC's", "V Quadrigeminy"), ("None", "PVC's", "PAC's", "Vent. Bigeminy"),
       (0.8, 0.14, 0.05, 0.01)),
    _t("ectopyf", 159, 224651, (59, 13), ("None", "Rare", "Occasional", "Frequent"), ("None", "Rare", "Occasional", "Frequent"),
       (0.4, 0.25, 0.28, 0.07)),
    _t("precaut", 550, 0, (67, 0), ("Universal", "Contact", "Droplet", "Airborne/Resp"), (), (0.88, 0.1, 0.015, 0.005)),
    _t("activity", 31, 224084, (20, 29), ("Bedrest", "Chair", "Commode", "Dangle", "Ambulate"),
       ("Bedrest", "Chair", "Commode", "Dangle", "Ambulate"), (0.9, 0.06, 0.01, 0.01, 0.02)),
    _t("rails", 637, 0, (20, 0), ("Side Rails Up", "All rails up", "3 rails up", "2 rails up"), (), (0.6, 0.34, 0.04, 0.02)),
    _t("tempsite", 674, 224642, (23, 20), ("Oral", "Axillary", "Rectal", "Blood"), ("Oral", "Axillary", "Rectal", "Blood"),
       (0.5, 0.3, 0.1, 0.1)),
    _t("falls", 1484, 0, (53, 0), ("Yes", "Other/Remarks"), (), (0.97, 0.03)),
    _t("service", 1125, 0, (66, 0), ("MICU", "MSICU", "CSICU", "NSICU", "CCU", "CSRU"), (), (0.3, 0.1, 0.15, 0.2, 0.15, 0.1)),
    _t("proxy", 1703, 0, (32, 0), ("Yes", "No"), (), (0.6, 0.4)),
    _t("resppat", 617, 0, (20, 0), ("Regular", "Tachypneic", "Irregular"), (), (0.88, 0.1, 0.02)),
    _t("hob", 0, 224080, (0, 29), (), ("30 Degrees", "45 Degrees", "15 Degrees", "90 Degrees", "Flat in Bed"),
       (0.72, 0.18, 0.03, 0.02, 0.05)),
    _t("turn", 0, 224082, (0, 29), (), ("Side to Side", "Back", "Right Side", "Left Side", "Turns by Self"),
       (0.6, 0.12, 0.1, 0.1, 0.08)),
    _t("safety", 0, 227969, (0, 35), (), ("Adequate lighting", "Bed locked in low position", "Lines and tubes concealed",
                                          "Bed alarm activated", "Call light within reach"), (0.3, 0.25, 0.15, 0.15, 0.15)),
    _t("alarmson", 0, 224641, (0, 19), (), ("1",), (1.0,), nums=((), (1,))),
    _t("occlusive", 0, 227368, (0, 10), (), ("1",), (1.0,), nums=((), (1,))),
)


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
    return Lab(itemid, label, category, loinc, uom, panel, math.log(mean) if log else mean, sd, load, dec, ref, log, fluid)


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
    _lab(50878, "Asparate Aminotransferase (AST)", "Chemistry", "1920-8", "IU/L", "lft", 35, 0.8, 0.25, 0, (0, 40), True),
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
    "carevue": ((5684, 1 / 12, "art", "Date", "insert"), (5685, 1 / 24, "", "Date", "insert"), (3411, 1 / 24, "", "Date", "recent")),
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
    "URGENT": (("TRANSFER FROM HOSP/EXTRAM", 0.6), ("PHYS REFERRAL/NORMAL DELI", 0.2), ("CLINIC REFERRAL/PREMATURE", 0.2)),
    "ELECTIVE": (("PHYS REFERRAL/NORMAL DELI", 0.9), ("CLINIC REFERRAL/PREMATURE", 0.1)),
    "NEWBORN": (("PHYS REFERRAL/NORMAL DELI", 0.7), ("CLINIC REFERRAL/PREMATURE", 0.3)),
}
CAREUNITS = {  # FIRST_CAREUNIT by admission type (value, probability)
    "EMERGENCY": (("MICU", 0.5), ("SICU", 0.15), ("CCU", 0.15), ("TSICU", 0.12), ("CSRU", 0.08)),
    "URGENT": (("MICU", 0.4), ("CCU", 0.3), ("CSRU", 0.3)),
    "ELECTIVE": (("CSRU", 0.6), ("SICU", 0.4)),
    "NEWBORN": (("NICU", 1.0),),
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
