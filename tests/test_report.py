"""The cohort report of `score --report`: one self-contained HTML page (no URL, no script, plots as
inline SVG) that an HTML parser reads, with the census summary, every admission by risk and the
validation reliability diagram; rendered by headless Chromium to a PNG that is not blank."""

from __future__ import annotations

import html.parser
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
    from pipeline import privacy

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
             "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1400"]
    png = tmp_path / "report.png"
    shot = subprocess.run([*flags, f"--screenshot={png}", s.report.as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    dom = subprocess.run([*flags, "--dump-dom", s.report.as_uri()], capture_output=True, text=True, timeout=120)
    assert "Mortality risk: cohort report" in dom.stdout and "Admissions by risk" in dom.stdout
    assert f"{s.admissions}</td>" in dom.stdout
    pixels = matplotlib.image.imread(png)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert pixels.shape[:2] == (1400, 1280)
    ink = (pixels.mean(axis=2) < 0.5).mean()  # dark pixels: text, rules, bars
    colour = (np.ptp(pixels, axis=2) > 0.2).mean()  # coloured pixels: the bars and the reliability dots
    assert ink > 0.005 and colour > 0.001, (ink, colour)
