"""The cohort report of `score --report`: one self-contained HTML page (no URL, no script, plots as
inline SVG) that an HTML parser reads, with the census summary, every admission by risk and the
validation reliability diagram; rendered by headless Chromium to a PNG that is not blank."""

from __future__ import annotations

import html.parser
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from helpers.raw_ids import raw_ids_of

from pipeline.serving import report as rp
from pipeline.serving import score as sc

pytestmark = pytest.mark.usefixtures("tracking_store")  # demo_run (conftest) is tracked there


@pytest.fixture(scope="module")
def census(demo_run, demo_dir, tmp_path_factory):
    """The whole demo scored from its tables with --report: (ScoreSummary, output directory)."""
    out = tmp_path_factory.mktemp("report")
    cfg = sc.ScoreConfig(samples=3, batch_size=16, threads=1)
    s = sc.score(demo_run, out / "scores.parquet", source=str(demo_dir), cfg=cfg, report=out / "census.html")
    return s, out


class Page(html.parser.HTMLParser):
    """Tags, attributes and text of a page (the standard library's parser: it raises on nothing, so the
    checks below are on what it saw)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.open = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_the_report_is_self_contained_html(census, demo_dir):
    from helpers import privacy_scan as privacy

    s, out = census
    text = s.report.read_text()
    page = Page()
    page.feed(text)
    page.close()
    assert page.tags[:3] == ["html", "head", "meta"] and "table" in page.tags and "svg" in page.tags
    assert "script" not in page.tags and "img" not in page.tags and "link" not in page.tags
    assert not [a for a in page.attrs if a[1] in ("src", "href") or "url(" in a[2]]
    assert "://" not in text and "url(" not in text and "@import" not in text and "http" not in text.lower()
    words = " ".join(" ".join(page.text).split())
    assert f"Admissions scored {s.admissions}" in words and f"Not scored {s.not_scored}" in words
    assert "died or discharged before T" in words and "Validation AUC-ROC" in words
    assert "Validation reliability" in words  # recorded at training (model_info.json)
    assert not privacy.scan([s.report], raw_ids_of(demo_dir))  # pseudonyms only


def test_admissions_are_listed_by_risk_with_their_interval(census):
    s, _ = census
    scores = pd.read_parquet(s.out)
    text = s.report.read_text()
    order = scores.sort_values(["risk_mean", "key"], ascending=[False, True], kind="mergesort")["key"].tolist()
    positions = [text.index(k) for k in order]
    assert positions == sorted(positions) and len(order) == s.admissions
    top = scores.set_index("key").loc[order[0]]
    assert f"{100 * top.risk_p05:.1f}% &ndash; {100 * top.risk_p95:.1f}%" in text
    assert text.count('<svg class="bar"') == s.admissions + 1  # one bar per admission and the legend's
    assert text.count("flag refer") == s.referred


def test_the_private_copy_carries_hadm_ids(census, demo_features):
    s, out = census
    assert s.private_report == out / "_private" / "census.html"
    assert oct(s.private_report.stat().st_mode & 0o777) == "0o600"
    link = pd.read_csv(out / "_private" / "link.csv")
    private = s.private_report.read_text()
    assert all(f">{h}<" in private for h in link["hadm_id"]) and not any(k in private for k in link["key"])


def test_bars_and_scale():
    frame = pd.DataFrame({"risk_p95": [0.03, 0.17]})
    assert rp.scale_of(frame) == 0.2 and rp.scale_of(frame.head(1)) == 0.05
    bar = rp.risk_bar(0.1, 0.05, 0.15, 0.2, refer=True)
    assert 'x="60.5"' in bar and "#d9822b" in bar  # p05 at a quarter of 238 px (+1), the refer colour
    svg = rp.reliability_svg({"counts": [5, 0, 3], "mean_p": [0.05, None, 0.4], "observed": [0.0, None, 0.5]})
    assert svg.count("<circle") == 2  # the empty bin is not drawn


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def test_chromium_renders_the_report(census, tmp_path):
    """Headless Chromium renders the page: its text (the DOM after rendering) holds the summary, and
    the screenshot (kept under tmp_path) is not blank."""
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium on PATH: install Debian's `chromium` package (.ci/run does) to render the report")
    import matplotlib.image

    s, _ = census
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400"]
    png = tmp_path / "report.png"
    shot = subprocess.run([*flags, f"--screenshot={png}", s.report.as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    dom = subprocess.run([*flags, "--dump-dom", s.report.as_uri()], capture_output=True, text=True, timeout=120)
    assert "Mortality risk: cohort report" in dom.stdout and "Admissions by risk" in dom.stdout
    assert f"{s.admissions}</td>" in dom.stdout
    pixels = matplotlib.image.imread(png)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert pixels.shape[:2] == (2400, 1280)  # tall enough for the warnings, the facts and the first bars
    ink = (pixels.mean(axis=2) < 0.5).mean()  # dark pixels: text, rules, bars
    colour = (np.ptp(pixels, axis=2) > 0.2).mean()  # coloured pixels: the bars and the reliability dots
    assert ink > 0.005 and colour > 0.001, (ink, colour)


# ---------------------------------------------------------------------------- what the page says


def _scores(n: int, referred_every: int = 10, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    risk = rng.beta(1, 12, n)
    return pd.DataFrame({"key": [f"{i:016x}" for i in range(n)], "risk_mean": risk, "risk_sd": risk / 4,
                         "risk_p05": risk * 0.6, "risk_p95": np.minimum(risk * 1.5, 1.0),
                         "mutual_information": rng.random(n), "refer": np.arange(n) % referred_every == 0,
                         "no_events": np.zeros(n, bool), "before_prediction_time": np.zeros(n, bool),
                         "observed_hours": np.full(n, 24.0, np.float32), "n_events": np.full(n, 5),
                         "risk_calibrated": risk * 0.9, "high_risk": risk * 0.9 >= 0.2})


PROMISE = ("refer 14% of admissions: on the others the model misses at most 5% of deaths, with 90% confidence "
           "(calibrated on 1,204 admissions, 131 deaths); it assumes the scored patients resemble those")
RETENTION = {"fractions": [0.0, 0.1, 0.2, 0.3], "n_kept": [1000, 900, 800, 700], "auc_pr": [0.40, 0.36, 0.31, 0.27],
             "nll": [0.25, 0.21, 0.18, 0.15], "ordering": "decision", "n": 1000}
POLICY = {"promise": PROMISE, "reason": "referred because the model cannot tell which side of the decision threshold "
          "the risk lies on", "policy_lines": ["risks recalibrated by temperature on 1,204 calibration admissions",
                                               "decision threshold 0.2 (fixed)"], "retention": RETENTION}


GOOD_VAL = {"n": 1000, "positives": 100, "auc_roc": 0.85, "auc_pr": 0.4, "nll": 0.25, "brier": 0.07, "ece": 0.01}
REL = {"counts": [700, 0, 250, 50], "mean_p": [0.03, None, 0.2, 0.6], "observed": [0.02, None, 0.25, 0.5]}


def _page(scores, **kw) -> tuple[str, str]:
    inp = rp.ReportInput(scores=scores, run_id="r" * 32, model_kind="rank1", samples=25, components=4,
                         refer_threshold=0.01, **{"val_metrics": GOOD_VAL, "reliability": REL,
                                                  "prediction_hours": 24.0, "generated": "2 Dec 2026 05:58 UTC",
                                                  **POLICY, **kw})
    text = rp.render(inp)
    page = Page()
    page.feed(text)
    return text, " ".join(" ".join(page.text).split())


def test_a_large_census_is_capped_with_the_highest_risks_and_the_referred_first():
    """50,777 admissions (a full-scale world) once made a 25.5 MB page of 50,777 rows: now the 500
    highest risks and the 500 highest-risk referred, each table saying how many of how many."""
    scores = _scores(50_777)
    text, words = _page(scores, scores_file="scores.parquet")
    assert len(text) < 2_000_000, len(text)
    assert ("The 500 highest risks of the 50,777 admissions scored (the page shows at most 500 per table); every "
            "admission is in scores.parquet.") in words
    assert ("The 500 highest risks of the 5,078 admissions referred (referred because the model cannot tell which "
            "side of the decision threshold the risk lies on), highest first.") in words
    assert text.index("Highest risk</h2>") < text.index("Referred for review</h2>")
    top = scores.sort_values("risk_mean", ascending=False)["key"].head(500).tolist()
    positions = [text.index(k) for k in top]
    assert positions == sorted(positions)  # highest first
    assert text.count('<svg class="bar"') == 500 + 500 + 1  # two capped tables and the legend
    small, _ = _page(scores.head(300))
    assert small.count('<svg class="bar"') == 301 and "Highest risk</h2>" not in small  # all of them, one table


def test_the_page_states_the_prediction_time_when_it_was_made_and_the_bins():
    text, words = _page(_scores(50))
    assert "Prediction time 24 h after admission" in words and "Report made 2 Dec 2026 05:58 UTC" in words
    assert "after the prediction time (24 h after admission)" in words
    assert "Predicted (bin mean) Observed Admissions 3.0% 2.0% 700 20.0% 25.0% 250 60.0% 50.0% 50" in words
    assert "warn" not in text.split("</style>")[1]  # a model that discriminates, 100 deaths: no caution
    from helpers import privacy_scan as privacy

    assert not privacy.DATE.search(text)  # the date in words: no YYYY-MM-DD on the page
    assert rp.generated_now().endswith(" UTC") and not privacy.DATE.search(rp.generated_now())


def test_the_promise_is_at_the_top_and_the_retention_curves_are_drawn():
    text, words = _page(_scores(60))
    body = text.split("</style>")[1]
    assert body.index('<div class="promise">') < body.index("<h2>Summary</h2>")
    assert PROMISE[:1].upper() + PROMISE[1:] + "." in words
    assert "The refer flag: referred because the model cannot tell which side of the decision threshold" in words
    assert "risks recalibrated by temperature on 1,204 calibration admissions" in words
    assert "What referring buys" in words and body.count('aria-label="retention curve') == 2
    high = int(_scores(60)["high_risk"].sum())
    assert f"High risk (calibrated risk at or above the decision threshold) {high:,}" in words
    assert "<th>Calibrated</th>" in text and text.count('class="flag high"') == high


@pytest.mark.parametrize("why", [None, "the 6 validation admissions kept apart for calibration (the calibration half, "
                                        "--calibration-share 0.5) held no death"])
def test_a_run_without_calibration_says_so_and_promises_nothing(why):
    """Issue 46, item 2: the page said "trained before risks were recalibrated" of every run without a policy; it
    says the reason the run recorded."""
    text, words = _page(_scores(30), promise=None, reason=None, policy_lines=[], retention=None, no_policy=why)
    assert "trained before risks were recalibrated" not in words
    assert f"No calibration: {why or 'this model records no policy'}; the risks are the model" in words
    assert "with no promise about the admissions not referred" in words
    assert '<div class="promise">' not in text and "What referring buys" not in words
    assert "Referred for review (refer measure above its validation threshold; no promise)" in words
    assert "<th>Calibrated</th>" not in text


@pytest.mark.parametrize("val, cautions", [
    ({"n": 189, "positives": 1, "auc_roc": 0.5}, ["showed no discrimination: AUC-ROC 0.500 (95% interval",
                                                  "Validation had 1 deaths (fewer than 10)"]),
    ({"n": 2000, "positives": 12, "auc_roc": 0.58}, ["showed no discrimination: AUC-ROC 0.580 (95% interval"]),
    ({"n": 2000, "positives": 200, "auc_roc": 0.58}, []),  # 200 deaths: 0.58 is reliably above chance
    (None, ["No validation metrics were recorded with this model"]),
    ({"n": 13, "positives": 0, "auc_roc": float("nan")},  # issue 46: "AUC-ROC n/a is no better than chance"
     ["On its 13 validation admissions (0 deaths) the model's discrimination could not be measured: AUC-ROC is "
      "undefined without both outcomes", "Validation had 0 deaths (fewer than 10)"]),
    ({"n": 13, "positives": 13, "auc_roc": None}, ["discrimination could not be measured"]),
    ({"n": 2000, "positives": 200, "auc_roc": 0.2}, ["ranked the wrong way round: AUC-ROC 0.200 (95% interval"]),
])
def test_weak_validation_gets_a_plain_warning(val, cautions):
    text, words = _page(_scores(40), val_metrics=val)
    assert text.count('<div class="warn">') == len(cautions)
    for c in cautions:
        assert c in words
    assert "n/a is no better than chance" not in words


def test_auc_roc_interval_follows_hanley_and_mcneil():
    lo, hi = rp.auc_roc_interval(0.85, 100, 900)  # Q1 = A/(2-A), Q2 = 2A²/(1+A): SE 0.02459 by hand
    assert (lo, hi) == pytest.approx((0.85 - 1.96 * 0.02459, 0.85 + 1.96 * 0.02459), abs=2e-4)
    assert rp.auc_roc_interval(0.5, 0, 10) is None


def test_scoring_a_features_directory_says_each_admissions_split(demo_run, demo_features, tmp_path):
    """Training admissions scored are said to be in-sample; every row names its split."""
    cfg = sc.ScoreConfig(samples=2, batch_size=16, threads=1)
    s = sc.score(demo_run, tmp_path / "scores.parquet", data=demo_features.out_dir, cfg=cfg,
                 report=tmp_path / "r.html", link=False)
    text = s.report.read_text()
    page = Page()
    page.feed(text)
    words = " ".join(" ".join(page.text).split())
    counts = {split: len(pd.read_parquet(demo_features.out_dir / f"{split}.parquet", columns=["key"]))
              for split in ("train", "val", "test")}
    for split, count in counts.items():
        assert f"from the {split} split {count:,}" in words
    assert (f"{counts['train']:,} of these admissions come from the features' train split, which the model was "
            "fitted on: their risks are in-sample") in words
    assert "<th>Split</th>" in text and text.count("<td>train</td>") == counts["train"]
    assert "Prediction time 24 h after admission" in words


READMISSION = dict(name="readmission/general_hospital/30d", outcome="hospital readmission within 30 days",
                   outcomes="hospital readmissions within 30 days", prediction_time="at the hospital discharge",
                   source="meds:MIMIC-IV")


def test_the_page_speaks_in_the_words_of_the_runs_task():
    """Issue 44, item 2: the title, the opening sentence, the prediction time, the counts and the reliability axis
    say the run's outcome; a run of another task than mortality never reads as a death."""
    from pipeline.data.task import TaskWords

    val = {**GOOD_VAL, "positives": 5}
    text, words = _page(_scores(30), task=TaskWords(**READMISSION), val_metrics=val, promise=None, reason=None,
                        policy_lines=[], retention=None, prediction_hours=0.0)
    assert "<h1>Risk of hospital readmission within 30 days: cohort report</h1>" in text
    assert ("Predicted probability of hospital readmission within 30 days after the prediction time (at the "
            "hospital discharge)") in words
    assert "Prediction time at the hospital discharge" in words
    assert "Validation had 5 hospital readmissions within 30 days (fewer than 10)" in words
    assert "1,000 (5 hospital readmissions within 30 days)" in words
    assert "observed rate of hospital readmissions within 30 days" in text
    assert not re.search(r"death|died|mortality", text, re.I)
    mimic, mimic_words = _page(_scores(30))  # a mortality run reads as it always has
    assert "<h1>Mortality risk: cohort report</h1>" in mimic and "observed death rate" in mimic
    assert "Predicted probability of in-hospital death after the prediction time (24 h after admission)" in mimic_words
