"""CHARTEVENTS catalog of the synthetic MIMIC-III (`pipeline.data.mimic.synth`): the charted concepts.

Real MIMIC-III v1.4 itemids and value strings of both ICU systems (CareVue and MetaVision) for
each concept the generator charts, with the parameters of its observation model (``Concept``).
Weights are relative charting frequencies (roughly the demo's rows per 100 stays). Data, not logic.
"""

from __future__ import annotations

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
_GCS_M = (("1 No Response", "2 Abnorm extensn", "3 Abnorm flexion", "4 Flex-withdraws", "5 Localizes Pain",
           "6 Obeys Commands"),
          ("No response", "Abnormal extension", "Abnormal Flexion", "Flex-withdraws", "Localizes Pain",
           "Obeys Commands"))
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
    _t("vmode", 720, 223849, (10, 8), ("CPAP+PS", "SIMV+PS", "Assist Control"),
       ("CPAP/PSV", "CMV/ASSIST", "CMV/ASSIST/AutoFlow"), (0.3, 0.15, 0.55), 0.5, needs="vent"),
    _t("code", 128, 223758, (70, 2), ("Full Code", "Do Not Resuscita"), ("Full code", "DNR / DNI"), (1.0, 0.0),
       flag="dnr"),
    # text nuisance
    _t("ectopy", 161, 224650, (69, 70), ("None", "PVC's", "PAC's", "V Quadrigeminy"),
       ("None", "PVC's", "PAC's", "Vent. Bigeminy"), (0.8, 0.14, 0.05, 0.01)),
    _t("ectopyf", 159, 224651, (59, 13), ("None", "Rare", "Occasional", "Frequent"),
       ("None", "Rare", "Occasional", "Frequent"), (0.4, 0.25, 0.28, 0.07)),
    _t("precaut", 550, 0, (67, 0), ("Universal", "Contact", "Droplet", "Airborne/Resp"), (), (0.88, 0.1, 0.015, 0.005)),
    _t("activity", 31, 224084, (20, 29), ("Bedrest", "Chair", "Commode", "Dangle", "Ambulate"),
       ("Bedrest", "Chair", "Commode", "Dangle", "Ambulate"), (0.9, 0.06, 0.01, 0.01, 0.02)),
    _t("rails", 637, 0, (20, 0), ("Side Rails Up", "All rails up", "3 rails up", "2 rails up"), (),
       (0.6, 0.34, 0.04, 0.02)),
    _t("tempsite", 674, 224642, (23, 20), ("Oral", "Axillary", "Rectal", "Blood"),
       ("Oral", "Axillary", "Rectal", "Blood"), (0.5, 0.3, 0.1, 0.1)),
    _t("falls", 1484, 0, (53, 0), ("Yes", "Other/Remarks"), (), (0.97, 0.03)),
    _t("service", 1125, 0, (66, 0), ("MICU", "MSICU", "CSICU", "NSICU", "CCU", "CSRU"), (),
       (0.3, 0.1, 0.15, 0.2, 0.15, 0.1)),
    _t("proxy", 1703, 0, (32, 0), ("Yes", "No"), (), (0.6, 0.4)),
    _t("resppat", 617, 0, (20, 0), ("Regular", "Tachypneic", "Irregular"), (), (0.88, 0.1, 0.02)),
    _t("hob", 0, 224080, (0, 29), (), ("30 Degrees", "45 Degrees", "15 Degrees", "90 Degrees", "Flat in Bed"),
       (0.72, 0.18, 0.03, 0.02, 0.05)),
    _t("turn", 0, 224082, (0, 29), (), ("Side to Side", "Back", "Right Side", "Left Side", "Turns by Self"),
       (0.6, 0.12, 0.1, 0.1, 0.08)),
    _t("safety", 0, 227969, (0, 35), (),
       ("Adequate lighting", "Bed locked in low position", "Lines and tubes concealed", "Bed alarm activated",
        "Call light within reach"),
       (0.3, 0.25, 0.15, 0.15, 0.15)),
    _t("alarmson", 0, 224641, (0, 19), (), ("1",), (1.0,), nums=((), (1,))),
    _t("occlusive", 0, 227368, (0, 10), (), ("1",), (1.0,), nums=((), (1,))),
)
