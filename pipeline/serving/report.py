"""The cohort report of a scoring run: one self-contained HTML page a clinical team reads.

``render`` returns the page, in the words of the run's task (``task``: ``data.task.TaskWords``; the title, the
opening sentence, the counts of the outcome): plain-language warnings first (validation showed no discrimination:
its AUC-ROC 95% interval covers 0.5, or it could not be measured; fewer than 10 validation deaths (or readmissions,
...): calibration cannot be judged;
admissions of the features' train split, which the model was fitted on), a summary (the prediction
time, when the report was made, admissions scored, not scored by reason, the split each came from
when a features directory was scored, referred, scored before their prediction time, mean risk,
the model's run and validation metrics), the admissions ordered by risk with their mean risk and
5-95% interval drawn as a bar, their split and their refer, partial-window and no-event flags, and
the reliability diagram of the model's validation split with each bin's counts. A census larger
than ``max_rows`` keeps the page usable: the ``max_rows`` highest risks, then the ``max_rows``
highest-risk referred admissions, each table saying how many of how many it shows; the full table
is the Parquet file the report summarises. Everything is inline: CSS in a <style> element, plots
as inline SVG; no script, no font, no image file and no URL of any kind, so the page shows the
same offline, on a ward screen or on paper (print styles: the table header repeats, rows do not
split). The one calendar date is when the report was made, in words ("2 Dec 2026 05:58 UTC"):
no date of a patient's record is written.

Rows are keyed by pseudonym; the data owner's copy (``ids``: pseudonym -> HADM_ID) shows
HADM_IDs instead and belongs in ``_private/``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.contracts import MIN_DEATHS
from pipeline.data.task import MORTALITY
from pipeline.serving.style import CSS as _CSS

SCALES = (0.05, 0.1, 0.2, 0.25, 0.5, 1.0)  # the bars' risk axis ends at the first of these above every p95
BAR_W, BAR_H = 240, 16  # px of one admission's risk bar
MAX_ROWS = 500  # admissions per table of the page; a larger census: the highest risks, then the referred


@dataclass
class ReportInput:
    """What the report shows (the scores table is ``contracts.RISK``)."""

    scores: object  # pandas DataFrame of the risk table, one row per admission
    run_id: str | None  # the model's MLflow run (None: a model directory)
    model_kind: str  # rank1, deterministic, ...
    samples: int  # Monte Carlo samples per component used
    components: int  # K
    refer_threshold: float  # value of the refer measure above which an admission is referred
    val_metrics: dict | None = None  # the model's validation metrics (nll, auc_pr, auc_roc, ece, brier, n, positives)
    reliability: dict | None = None  # validation reliability bins: counts, mean_p, observed (lists)
    not_scored: dict | None = None  # reason -> count (None: not known, e.g. features scored as given)
    ids: dict | None = field(default=None, repr=False)  # pseudonym -> HADM_ID: the data owner's copy only
    refer_measure: str = "mi"  # what refer ranks by: mi, sd, entropy, band (model_info refer_measure)
    refer_measure_source: str | None = None  # why: validation truth, synthetic benchmark, point model
    prediction_hours: float | None = None  # the prediction time T, hours after admission (None: not recorded)
    generated: str = field(default_factory=lambda: generated_now())  # when the report was made, in words (UTC)
    splits: dict | None = None  # pseudonym -> split (train, val, test) of a scored features directory
    scores_file: str | None = None  # name of the Parquet file with every row (said when the page is capped)
    max_rows: int = MAX_ROWS  # admissions per table (see the module docstring)
    promise: str | None = None  # the refer rule in one plain sentence (None: the run has no policy)
    reason: str | None = None  # why an admission is referred, in plain words ("referred because ...", or every one)
    policy_lines: list[str] = field(default_factory=list)  # how the risk was recalibrated; the decision threshold
    retention: dict | None = None  # the calibration admissions' retention curve (selective.RetentionCurve.to_dict,
        # with "ordering" and "n"): AUC-PR and NLL of the kept against the share referred
    shift: dict | None = None  # the shift check (tasks.mortality.shift.CohortCheck.to_dict): its sentence, a banner
    task: object | None = None  # what the run predicts, in words (data.task.TaskWords; None: in-hospital mortality)
    no_policy: str | None = None  # why the run has no policy, in words (serving.decisions.no_policy)

    @property
    def words(self):
        """The run's task in words (``task``, else in-hospital mortality's)."""
        return self.task or MORTALITY

    @property
    def when(self) -> str:
        """The prediction time in words: hours after admission (MIMIC features), the task's own words (MEDS)."""
        if self.task is not None and str(self.task.source).startswith("meds:"):
            return self.task.prediction_time
        return "not recorded" if self.prediction_hours is None else f"{self.prediction_hours:g} h after admission"


MEASURE_NAMES = {"mi": "mutual information", "sd": "risk standard deviation", "entropy": "predictive entropy",
                 "band": "width of the 5-95% band"}  # metrics.Measure values, as the report names them


def generated_now() -> str:
    """Now in UTC, the month in words (no YYYY-MM-DD: the privacy scan's calendar-date pattern)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%-d %b %Y %H:%M UTC")


def auc_roc_interval(auc: float | None, positives: int, negatives: int) -> tuple[float, float] | None:
    """95% interval of an AUC-ROC from its value and class sizes (Hanley & McNeil 1982's standard
    error; None when it cannot be formed): what the report judges "no discrimination" by."""
    if auc is None or auc != auc or positives < 1 or negatives < 1:
        return None
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (positives - 1) * (q1 - auc * auc) + (negatives - 1) * (q2 - auc * auc)) \
        / (positives * negatives)
    se = math.sqrt(max(var, 0.0))
    return max(0.0, auc - 1.96 * se), min(1.0, auc + 1.96 * se)


def warnings_of(inp: "ReportInput", splits: dict) -> list[str]:
    """The plain-language cautions the page opens with (see the module docstring)."""
    out = []
    vm = inp.val_metrics or {}
    w = inp.words
    n, positives = int(vm.get("n") or 0), int(vm.get("positives") or 0)
    if vm:
        auc = vm.get("auc_roc")
        ci = vm.get("auc_roc_ci") or auc_roc_interval(auc, positives, n - positives)
        if auc is None or auc != auc:  # undefined: a validation split of one outcome (or none recorded)
            out.append(f"On its {n:,} validation admissions ({positives:,} {w.events}) the model's discrimination "
                       "could not be measured: AUC-ROC is undefined without both outcomes. Do not rank patients by "
                       "these risks.")
        elif ci is None or ci[0] <= 0.5:
            shown = "" if ci is None else f" (95% interval {_num(ci[0])} to {_num(ci[1])})"
            worse = ci is not None and ci[1] < 0.5
            out.append("On its validation admissions the model "
                       + (f"ranked the wrong way round: AUC-ROC {_num(auc)}{shown} is worse than chance (0.5). "
                          if worse else f"showed no discrimination: AUC-ROC {_num(auc)}{shown} is no better than "
                                        "chance (0.5). ") + "Do not rank patients by these risks.")
        if positives < MIN_DEATHS:
            out.append(f"Validation had {positives} {w.events} (fewer than {MIN_DEATHS}): whether the risks are "
                       "calibrated (the reliability diagram, the ECE) cannot be judged.")
    else:
        out.append("No validation metrics were recorded with this model: how well it discriminates and whether "
                   "its risks are calibrated are unknown.")
    if splits.get("train"):
        out.append(f"{splits['train']:,} of these admissions come from the features' train split, which the model was "
                   "fitted on: their risks are in-sample and look better than the model is. Judge it on test.")
    return out


def shift_banner(shift: dict | None) -> str:
    """The shift check's sentence at the top: a warning when the cohort differs from the calibration admissions."""
    if not shift or not shift.get("sentence"):
        return ""
    kind = "warn shift" if shift.get("verdict") == "shifted" else "note shift"
    text = shift["sentence"]
    return f'<div class="{kind}">{html.escape(text[:1].upper() + text[1:])}.</div>\n'


def _pct(p: float, digits: int = 1) -> str:
    return "n/a" if p is None or p != p else f"{100.0 * p:.{digits}f}%"


def _num(v, digits: int = 3) -> str:
    return "n/a" if v is None or v != v else f"{v:.{digits}f}"


def scale_of(scores) -> float:
    """End of the bars' risk axis: the first of ``SCALES`` at or above every admission's p95."""
    top = float(scores["risk_p95"].max()) if len(scores) else 0.0
    return next((s for s in SCALES if top <= s), 1.0)


def risk_bar(mean: float, lo: float, hi: float, scale: float, refer: bool) -> str:
    """Inline SVG: the 5-95% interval as a band, the mean as a tick, on a 0..scale axis."""
    def x(p: float) -> float:
        return round(min(max(p, 0.0), scale) / scale * (BAR_W - 2) + 1, 1)

    band = "#d9822b" if refer else "#7a9cc6"
    return (f'<svg class="bar" width="{BAR_W}" height="{BAR_H}" viewBox="0 0 {BAR_W} {BAR_H}" role="img" '
            f'aria-label="risk {_pct(mean)}, 5-95% {_pct(lo)} to {_pct(hi)}">'
            f'<rect x="0" y="5" width="{BAR_W}" height="6" fill="#eeeeee"/>'
            f'<rect x="{x(lo)}" y="3" width="{max(x(hi) - x(lo), 1.5)}" height="10" fill="{band}"/>'
            f'<rect x="{x(mean) - 1.5}" y="0" width="3" height="{BAR_H}" fill="#111111"/></svg>')


def reliability_svg(rel: dict, size: int = 320, rate: str = "death rate") -> str:
    """Inline SVG of a reliability diagram: the observed ``rate`` (of the outcome) against mean predicted risk per
    bin (dot area by admissions), the diagonal of perfect calibration."""
    pad, inner = 44, size - 58
    counts = [int(c or 0) for c in rel.get("counts") or []]
    pts = [(m, o, c) for m, o, c in zip(rel.get("mean_p") or [], rel.get("observed") or [], counts)
           if c and m is not None and o is not None and m == m and o == o]
    top = max([0.1] + [max(m, o) for m, o, _ in pts])
    top = next((s for s in SCALES if top <= s), 1.0)

    def px(v: float) -> float:
        return round(pad + v / top * inner, 1)

    def py(v: float) -> float:
        return round(size - pad + 10 - v / top * inner, 1)

    parts = [f'<svg width="{size}" height="{size}" viewBox="0 0 {size} {size}" role="img" '
             'aria-label="reliability diagram of the validation split">',
             f'<rect x="{pad}" y="{py(top)}" width="{inner}" height="{inner}" fill="#fafafa" stroke="#999999"/>',
             f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(top)}" y2="{py(top)}" stroke="#999999" stroke-dasharray="4 3"/>']
    for t in (0.0, top / 2, top):
        parts.append(f'<text x="{px(t)}" y="{py(0) + 16}" text-anchor="middle" font-size="11">{_pct(t, 0)}</text>')
        parts.append(f'<text x="{pad - 4}" y="{py(t) + 4}" text-anchor="end" font-size="11">{_pct(t, 0)}</text>')
    parts.append(f'<text x="{px(top / 2)}" y="{size - 6}" text-anchor="middle" font-size="12">predicted risk '
                 '(bin mean)</text>')
    parts.append(f'<text x="12" y="{py(top / 2)}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 12 {py(top / 2)})">observed {html.escape(rate)}</text>')
    biggest = max([c for _, _, c in pts] or [1])
    for m, o, c in pts:
        r = round(3 + 7 * math.sqrt(c / biggest), 1)
        parts.append(f'<circle cx="{px(min(m, top))}" cy="{py(min(o, top))}" r="{r}" fill="#2f6db5" '
                     f'fill-opacity="0.75"><title>{c} admissions: predicted {_pct(m)}, observed {_pct(o)}</title>'
                     '</circle>')
    parts.append("</svg>")
    return "".join(parts)


def retention_svg(ret: dict, metric: str, width: int = 320, height: int = 220) -> str:
    """Inline SVG of one retention curve: ``metric`` (auc_pr or nll) of the kept admissions against the share
    referred (highest ordering measure first)."""
    pad_l, pad_b, pad_t, pad_r = 50, 40, 12, 12
    pts = [(f, v) for f, v in zip(ret.get("fractions") or [], ret.get(metric) or []) if v is not None and v == v]
    if not pts:
        return ""
    top_f = max(f for f, _ in pts) or 1.0
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05

    def px(f: float) -> float:
        return round(pad_l + f / top_f * (width - pad_l - pad_r), 1)

    def py(v: float) -> float:
        return round(height - pad_b - (v - lo) / (hi - lo) * (height - pad_b - pad_t), 1)

    name = {"auc_pr": "AUC-PR of the kept", "nll": "NLL of the kept (nats)"}[metric]
    path = " ".join(f"{'M' if i == 0 else 'L'}{px(f)},{py(v)}" for i, (f, v) in enumerate(pts))
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="retention curve: {name} against the share referred">',
             f'<rect x="{pad_l}" y="{pad_t}" width="{width - pad_l - pad_r}" height="{height - pad_b - pad_t}" '
             'fill="#fafafa" stroke="#999999"/>', f'<path d="{path}" fill="none" stroke="#2f6db5" stroke-width="2"/>']
    for f in (0.0, top_f / 2, top_f):
        parts.append(f'<text x="{px(f)}" y="{height - pad_b + 15}" text-anchor="middle" font-size="11">'
                     f'{_pct(f, 0)}</text>')
    for v in (lo, hi):
        parts.append(f'<text x="{pad_l - 4}" y="{py(v) + 4}" text-anchor="end" font-size="11">{v:.3f}</text>')
    parts.append(f'<text x="{px(top_f / 2)}" y="{height - 6}" text-anchor="middle" font-size="12">share referred'
                 '</text>')
    parts.append(f'<text x="12" y="{py((lo + hi) / 2)}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 12 {py((lo + hi) / 2)})">{name}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _retention_block(inp: ReportInput) -> str:
    """The calibration admissions' retention curves, or nothing (a run without a policy)."""
    ret = inp.retention
    if not ret:
        return ""
    figs = "".join(retention_svg(ret, m) for m in ("auc_pr", "nll"))
    return (f'<h2>What referring buys</h2>\n<div class="note">On the run&rsquo;s {int(ret.get("n") or 0):,} '
            f"calibration admissions (kept apart from training and model choice): the AUC-PR and NLL of the "
            f"admissions kept when the share on the horizontal axis is referred, ranked as the refer flag ranks them "
            f"(by {html.escape(str(ret.get('ordering')))}). A curve that improves as more are referred means the flag "
            f'finds the admissions the model gets wrong.</div>\n<div class="summary">{figs}</div>')




def _bins_table(rel: dict) -> str:
    """The reliability bins as numbers: predicted, observed and admissions per non-empty bin."""
    rows = [(m, o, int(c))
            for m, o, c in zip(rel.get("mean_p") or [], rel.get("observed") or [], rel.get("counts") or [])
            if c and m is not None and o is not None and m == m and o == o]
    body = "".join(f'<tr><td class="num">{_pct(m)}</td><td class="num">{_pct(o)}</td><td class="num">{c:,}</td></tr>'
                   for m, o, c in rows)
    return ('<table class="bins"><thead><tr><th>Predicted (bin mean)</th><th>Observed</th><th>Admissions</th></tr>'
            f"</thead><tbody>{body}</tbody></table>")


def _admission_rows(s, inp: ReportInput, scale: float) -> str:
    """One <tr> per admission of ``s`` (already ordered), numbered from 1."""
    body = []
    for i, r in enumerate(s.itertuples(index=False), 1):
        key = str(inp.ids.get(r.key, "?")) if inp.ids is not None else r.key
        flags = []
        if r.high_risk:
            flags.append('<span class="flag high">HIGH RISK</span>')
        if r.refer:
            flags.append('<span class="flag refer">REFER</span>')
        if r.before_prediction_time:
            flags.append(f'<span class="flag partial">PARTIAL {_num(r.observed_hours, 1)} h</span>')
        if r.no_events:
            flags.append('<span class="flag empty">NO EVENTS</span>')
        split = f'<td>{html.escape(inp.splits.get(r.key, "?"))}</td>' if inp.splits is not None else ""
        body.append(f'<tr class="{"refer" if r.refer else ""}"><td class="num">{i}</td>'
                    f'<td class="key">{html.escape(key)}</td>{split}<td class="num"><b>{_pct(r.risk_mean)}</b></td>'
                    + (f'<td class="num">{_pct(r.risk_calibrated)}</td>' if inp.promise is not None else "") +
                    f'<td class="num">{_pct(r.risk_p05)} &ndash; {_pct(r.risk_p95)}</td>'
                    f'<td>{risk_bar(r.risk_mean, r.risk_p05, r.risk_p95, scale, bool(r.refer))}</td>'
                    f'<td>{" ".join(flags)}</td></tr>')
    return "\n".join(body)


def _tables(s, inp: ReportInput, scale: float, referred: int) -> str:
    """The admissions: all of them by risk, or (more than ``max_rows``) the highest risks and the
    highest-risk referred, each table saying how many of how many it shows."""
    label = "HADM_ID" if inp.ids is not None else "Admission (pseudonym)"
    split = "<th>Split</th>" if inp.splits is not None else ""
    calibrated = "<th>Calibrated</th>" if inp.promise is not None else ""
    head = (f'<table class="adm"><thead><tr><th>#</th><th>{label}</th>{split}<th>Risk</th>{calibrated}'
            "<th>5&ndash;95%</th>"
            "<th>Risk and interval\n</th><th>Flags</th></tr></thead>\n<tbody>\n")
    n, cap = len(s), inp.max_rows
    if n <= cap:
        return f"<h2>Admissions by risk</h2>\n{head}{_admission_rows(s, inp, scale)}\n</tbody></table>"
    where = f" in {html.escape(inp.scores_file)}" if inp.scores_file else " in the scores Parquet file"
    out = [f'<h2>Highest risk</h2>\n<div class="note cap">The {cap:,} highest risks of the {n:,} admissions scored '
           f"(the page shows at most {cap:,} per table); every admission is{where}.</div>",
           f"{head}{_admission_rows(s.head(cap), inp, scale)}\n</tbody></table>"]
    if referred:
        shown = min(cap, referred)
        out += [f'<h2>Referred for review</h2>\n<div class="note cap">The {shown:,} highest risks of the {referred:,} '
                f"admissions referred ({html.escape(inp.reason or 'refer measure above its threshold')}), highest "
                "first.</div>",
                f"{head}{_admission_rows(s[s['refer']].head(cap), inp, scale)}\n</tbody></table>"]
    return "\n".join(out)


def render(inp: ReportInput) -> str:
    """The report as one HTML document (see the module docstring)."""
    s = inp.scores.sort_values(["risk_mean", "key"], ascending=[False, True], kind="mergesort").reset_index(drop=True)
    n = len(s)
    referred, partial, empty = int(s["refer"].sum()), int(s["before_prediction_time"].sum()), int(s["no_events"].sum())
    ns = inp.not_scored
    split_counts = {}
    if inp.splits is not None:
        for k in s["key"]:
            split_counts[inp.splits.get(k, "?")] = split_counts.get(inp.splits.get(k, "?"), 0) + 1
    words, when = inp.words, html.escape(inp.when)
    facts = [("Prediction time", when), ("Report made", html.escape(inp.generated)), ("Admissions scored", f"{n:,}")]
    facts += [(f"&nbsp;&nbsp;from the {html.escape(name)} split", f"{count:,}") for name, count in split_counts.items()]
    if ns is None:
        facts.append(("Not scored", "not known (features scored as given)"))
    else:
        facts.append(("Not scored", f"{sum(ns.values()):,}"))
        facts += [(f"&nbsp;&nbsp;{html.escape(reason)}", f"{count:,}") for reason, count in ns.items() if count]
    why = inp.reason or "refer measure above its validation threshold; no promise"
    share = f" ({_pct(referred / n)})" if n else ""
    facts += [(f"Referred for review ({html.escape(why)})", f"{referred:,}{share}")]
    if inp.promise is not None:
        high = int(s["high_risk"].sum())
        facts.append(("High risk (calibrated risk at or above the decision threshold)",
                      f"{high:,}" + (f" ({_pct(high / n)})" if n else "")))
    facts += [
              ("Scored before their prediction time (partial window)", f"{partial:,}"),
              ("Without any event (context only)", f"{empty:,}"),
              ("Mean predicted risk", _pct(float(s["risk_mean"].mean())) if n else "n/a")]
    model = [("Model run", html.escape(inp.run_id or "a model directory")),
             ("Model", html.escape(f"{inp.model_kind}, {inp.samples} samples x {inp.components} components")),
             (f"Refer threshold ({MEASURE_NAMES.get(inp.refer_measure, inp.refer_measure)}"
              + (f"; chosen by {inp.refer_measure_source}" if inp.refer_measure_source else "") + ")",
              _num(inp.refer_threshold, 4))] if inp.promise is None else []
    vm = inp.val_metrics or {}
    if vm:
        model += [("Validation admissions", f"{int(vm.get('n') or 0):,} ({int(vm.get('positives') or 0):,} "
                                            f"{html.escape(words.events)})"),
                  ("Validation NLL / Brier", f"{_num(vm.get('nll'))} / {_num(vm.get('brier'))}"),
                  ("Validation AUC-ROC / AUC-PR", f"{_num(vm.get('auc_roc'))} / {_num(vm.get('auc_pr'))}"),
                  ("Validation ECE", _num(vm.get("ece")))]

    def fact_table(rows):
        return '<table class="facts">' + "".join(f'<tr><td>{k}</td><td class="n">{v}</td></tr>' for k, v in rows) \
            + "</table>"

    rel = (f'<div><div class="note">Validation reliability: dots on the dashed line are calibrated.</div>'
           f'{reliability_svg(inp.reliability, rate=words.rate)}{_bins_table(inp.reliability)}</div>') \
        if inp.reliability else \
        '<div class="note">No validation reliability was recorded with this model.</div>'
    scale = scale_of(s)
    cautions = warnings_of(inp, split_counts)
    warn = "".join(f'<div class="warn">{html.escape(w)}</div>' for w in cautions)
    if inp.promise is not None:
        promise = (f'<div class="promise">{html.escape(inp.promise[:1].upper() + inp.promise[1:])}.</div>'
                   + "".join(f'<div class="note">{html.escape(line)}.</div>' for line in
                             [f"The refer flag: {inp.reason}", *inp.policy_lines] if line))
    else:
        why = html.escape(inp.no_policy or "this model records no policy")
        promise = (f'<div class="warn nocal">No calibration: {why}; the risks are the model&rsquo;s own and REFER '
                   "marks its refer measure above a validation threshold, with no promise about the admissions not "
                   "referred.</div>")
    legend = risk_bar(scale * 0.4, scale * 0.25, scale * 0.6, scale, False)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(words.title)}: cohort report</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(words.title)}: cohort report</h1>
<div class="note">Predicted probability of {html.escape(words.outcome)} after the prediction time ({when}), with the
spread of the model's draws. An admission marked REFER is one to review rather than rely on the number; HIGH RISK
marks a calibrated risk at or above the run's decision threshold.
PARTIAL: the data ended before the prediction time, so the risk rests on the hours observed.</div>
{shift_banner(inp.shift)}{promise}
{warn}
<h2>Summary</h2>
<div class="summary">{fact_table(facts)}{fact_table(model)}{rel}</div>
<div class="note legend">Bar: {legend} the band is the 5&ndash;95% range of the model's draws, the black tick the
mean risk; the axis runs from 0 to {_pct(scale, 0)}. Highest risk first.</div>
{_retention_block(inp)}
{_tables(s, inp, scale, referred)}
</body></html>
"""


def write_report(path: Path | str, inp: ReportInput, mode: int | None = None) -> Path:
    """Write the report atomically (``mode`` 0o600 for the data owner's copy)."""
    return fileio.write_text(Path(path), render(inp), mode=mode)
