"""Training rates and stopping points of a series of `cli.py train` runs, read from the series' log.

    .venv/bin/python -m experiments.train_log_rates LOG [--json PATH]

The log is what a driver script wrote around `cli.py train ... -v` calls (the full-scale study's,
docs/experiments/2026-12-04-full-scale-convergence.md): each call preceded by a line ``== <split mode> <model>
<seed> [--resume]`` and a ``date`` stamp, then train's own output: its progress lines (``train S/C (P%) ... [T s,
about ... left]``: S steps done of the C steps at its 40-epoch ceiling, T seconds since this call started), its
closing ``steps=... best_step=... best_val_nll=...`` line and ``run_id: ...``. A run resumed after an
interruption spans several calls (segments). For each run it prints the steps trained and kept, epochs (steps
over the steps of one epoch, C / 40), the best validation NLL, and the rate timed by the progress lines: the
steps between the first and the last progress line of each segment over the seconds between them, summed over
the segments (validation passes included, start-up and the final calibration excluded), as steps/s and as
distinct admissions/s (rank-1: 16 distinct admissions a step, each tiled over its K = 4 members; the
deterministic LSTM: 64), and the wall time from the date stamps of a run that ran in one call.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from pathlib import Path

DISTINCT_PER_STEP = {"rank1": 16, "deterministic": 64}  # the default batch of 64 rows; rank-1 tiles over K = 4
MAX_EPOCHS = 40  # the ceiling the progress lines count to (C steps = 40 epochs)

HEADER = re.compile(r"^== (\w+) (\w+) (\d+)( --resume)?\s*$")
PROGRESS = re.compile(r"^train (\d+)/(\d+) \(\d+%\).*\[(\d+) s,")
CLOSING = re.compile(r"^steps=(\d+) best_step=(\d+) best_val_nll=([0-9.]+)")
RUN_ID = re.compile(r"^run_id: ([0-9a-f]{32})$")
STAMP = "%a %b %d %H:%M:%S %Z %Y"


def _stamp(line: str) -> datetime | None:
    try:
        return datetime.strptime(line.strip(), STAMP)
    except ValueError:
        return None


def parse(lines: list[str]) -> list[dict]:
    """The finished runs of the log, in order (a run without its ``run_id`` line is left out)."""
    runs, cur, last_stamp = [], None, None
    for line in lines:
        when = _stamp(line)
        if when is not None:
            if cur is not None and cur.get("run_id") and cur.get("ended") is None:
                cur["ended"] = when
            last_stamp = when
            continue
        m = HEADER.match(line)
        if m:
            mode, model, seed, resume = m.groups()
            key = (mode, model, int(seed))
            if cur is None or cur["key"] != key or cur.get("run_id"):
                cur = {"key": key, "segments": [], "started": last_stamp, "ended": None}
                runs.append(cur)
            cur["segments"].append([])
            continue
        if cur is None:
            continue
        m = PROGRESS.match(line)
        if m and cur["segments"]:
            step, ceiling, seconds = map(int, m.groups())
            cur["segments"][-1].append((step, seconds))
            cur["ceiling"] = ceiling
            continue
        m = CLOSING.match(line)
        if m:
            cur["steps"], cur["best_step"], cur["best_val_nll"] = int(m[1]), int(m[2]), float(m[3])
            continue
        m = RUN_ID.match(line)
        if m:
            cur["run_id"] = m[1]
    return [_summary(r) for r in runs if r.get("run_id")]


def _summary(r: dict) -> dict:
    mode, model, seed = r["key"]
    timed = [(seg[-1][0] - seg[0][0], seg[-1][1] - seg[0][1]) for seg in r["segments"] if len(seg) >= 2]
    steps_timed, seconds = sum(s for s, _ in timed), sum(t for _, t in timed)
    rate = steps_timed / seconds if seconds > 0 else None
    per_epoch = r.get("ceiling", 0) / MAX_EPOCHS
    one_call = len(r["segments"]) == 1 and r["started"] is not None and r["ended"] is not None
    return {"split_mode": mode, "model": model, "seed": seed, "run_id": r["run_id"], "segments": len(r["segments"]),
            "steps": r.get("steps"), "best_step": r.get("best_step"), "best_val_nll": r.get("best_val_nll"),
            "ceiling_steps": r.get("ceiling"), "epochs": (r["steps"] / per_epoch) if per_epoch and r.get("steps")
            else None, "steps_timed": steps_timed, "seconds_timed": seconds, "steps_per_s": rate,
            "admissions_per_s": rate * DISTINCT_PER_STEP[model] if rate is not None else None,
            "wall_minutes": (r["ended"] - r["started"]).total_seconds() / 60 if one_call else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="the driver's log")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    rows = parse(args.log.read_text().splitlines())
    print(f"{'split':>7s} {'model':>13s} {'seed':>4s} {'steps':>7s} {'ceiling':>8s} {'epochs':>6s} {'kept':>7s} "
          f"{'val nll':>9s} {'calls':>5s} {'timed steps':>11s} {'steps/s':>7s} {'adm/s':>6s} {'wall min':>8s}")
    for r in rows:
        wall = f"{r['wall_minutes']:8.1f}" if r["wall_minutes"] is not None else f"{'-':>8s}"
        rate = (f"{r['steps_per_s']:7.1f} {r['admissions_per_s']:6.0f}" if r["steps_per_s"] is not None
                else f"{'-':>7s} {'-':>6s}")
        print(f"{r['split_mode']:>7s} {r['model']:>13s} {r['seed']:>4d} {r['steps']:>7,d} {r['ceiling_steps']:>8,d} "
              f"{r['epochs']:6.1f} {r['best_step']:>7,d} {r['best_val_nll']:9.6f} {r['segments']:>5d} "
              f"{r['steps_timed']:>11,d} {rate} {wall}")
    if args.json:
        from pipeline.core import fileio

        fileio.write_text(args.json, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
