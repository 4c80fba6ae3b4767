"""The mortality models trained and scored on one device through the device data path (parts 2, 3 and 5 of
``benchmarks.device_mortality``; not a script of its own).

- ``recipe_rows`` (part 2): whole training steps of the mortality plan (``tasks.mortality.task.plan``: the
  batch, OOV augmentation, forward, NLL + KL + L2, backward, clipping, Adam, the loop's statistics read back)
  of the deterministic and the rank-1 LSTM under three recipes: the default preset with batches collated on
  the CPU (what a CUDA run took before issue 38), the GPU preset collated on the CPU, and the GPU preset on
  the device data path (``pipeline.data.resident``: what a CUDA run takes now); admissions per second count
  distinct admissions (rows / K). The steps of each recipe run in interleaved blocks (median).
- ``fullscale_part`` (part 5): ``workflows.train.train`` of rank-1 at the GPU preset on random features of
  full-scale MIMIC-III's shape (``--full-train`` / ``--full-val`` admissions) for ``--full-epochs`` epochs of
  distinct admissions (the CPU default's 4.8 at full scale), validation and checkpoints included, no tracking:
  the wall time from the features directory to the finished run.
- ``resident_score_rows`` (part 3, beside ``score_files``): the risk table of ``--score-n`` admissions already
  in memory, ``risk.score_features`` with ``--samples`` x K draws of a rank-1 model, its features resident
  on the device, at each ``--score-batch``; and the same risk table from batches collated on the CPU at the
  contract's batching, compared (the same generator and batches: the device data path changes no answer).

``shaped_features`` writes the random features all parts use: the shape of the synthetic benchmark (about
23 bags of about 31 of 833 tokens per admission, 22 context ids), vectorised (a MIMIC-III-sized cohort in
seconds).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

N_TOKENS, N_CONTEXT = 833, 23  # the synthetic benchmark's vocabulary sizes (with padding)
# (preset, the device data path, float32 matmul precision: "high" lets products take TF32, CUDA only)
RECIPES = (("default", False, "highest"), ("gpu", False, "highest"), ("gpu", True, "highest"), ("gpu", True, "high"))


def shaped_features(out: Path, n_train: int, n_val: int = 0, seed: int = 0) -> Path:
    """``out/train.parquet`` (and ``val.parquet`` with ``n_val``) and vocab.json of random admissions shaped like
    the synthetic benchmark's: bags N(23, 3) clipped to [2, 38], tokens per bag N(31, 9) clipped to [1, 91],
    sorted and unique ids in [1, 833), 4 context ids, a 10% label rate."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.core import fileio
    from pipeline.core.contracts import FEATURES

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([f for f in FEATURES.arrow_schema() if f.name != "bag_values"])
    for split, n in (("train", n_train), ("val", n_val)):
        if not n:
            continue
        t = np.clip(rng.normal(23, 3, n).round(), 2, 38).astype(np.int64)  # (N,) bags
        m = int(t.sum())
        s = np.clip(rng.normal(31, 9, m).round(), 1, 91).astype(np.int64)  # (M,) tokens drawn per bag
        bag_of = np.repeat(np.arange(m), s)  # (Z0,)
        step = np.maximum(1, 2 * ((N_TOKENS - 1) // (s + 1)))  # gaps with mean about (V - 1) / (s + 1)
        gaps = rng.integers(1, np.repeat(step, s) + 1)  # (Z0,) >= 1: ids rise within a bag
        first = np.cumsum(s) - s
        ids = np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[first] - gaps[first], s)  # running sum per bag
        ids = np.minimum(ids, N_TOKENS - 1)
        keep = np.ones(ids.shape[0], dtype=bool)
        keep[1:] = (ids[1:] != ids[:-1]) | (bag_of[1:] != bag_of[:-1])  # unique within a bag (the clip repeats)
        ids, bag_of = ids[keep], bag_of[keep]
        tok_off = np.concatenate([[0], np.cumsum(np.bincount(bag_of, minlength=m))])
        bag_off = np.concatenate([[0], np.cumsum(t)])
        slot = np.arange(m) - np.repeat(bag_off[:-1], t)
        hours = (slot - np.repeat(t, t) + 1).astype(np.float32)  # -T+1 .. 0
        bags = pa.ListArray.from_arrays(pa.array(bag_off, pa.int32()), pa.ListArray.from_arrays(
            pa.array(tok_off, pa.int32()), pa.array(ids.astype(np.int32))))
        cols = {"key": pa.array([f"{split}{i:027x}" for i in range(n)]),
                "label": pa.array((rng.random(n) < 0.1).astype(np.int8)),
                "age": pa.array(rng.uniform(20, 90, n).astype(np.float32)),
                "gender": pa.array(["M"] * n), "admission_type": pa.array(["EMERGENCY"] * n),
                "admission_location": pa.array(["X"] * n), "icu_system": pa.array(["carevue"] * n),
                "context": pa.ListArray.from_arrays(pa.array(np.arange(0, 4 * n + 1, 4), pa.int32()),
                                                    pa.array(rng.integers(1, N_CONTEXT, 4 * n).astype(np.int32))),
                "bag_hours": pa.ListArray.from_arrays(pa.array(bag_off, pa.int32()), pa.array(hours)),
                "bags": bags,
                "n_events": pa.array(np.add.reduceat(np.diff(tok_off), bag_off[:-1]).astype(np.int32)
                                     if m else np.zeros(n, np.int32)),
                "observed_hours": pa.array(np.full(n, 24.0, np.float32)),
                "before_prediction_time": pa.array(np.zeros(n, bool))}
        table = pa.table([cols[f.name].cast(f.type) for f in schema], schema=schema)
        pq.write_table(table, out / f"{split}.parquet", compression="zstd")
    fileio.write_json(out / "vocab.json", {"tokens": ["<pad>"] + [f"t{i}" for i in range(1, N_TOKENS)],
                                           "context": ["<pad>"] + [f"c{i}" for i in range(1, N_CONTEXT)], "bins": {}})
    return out


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def step_closure(p, device, precision: str = "highest"):
    """The engine loop's step on plan ``p`` as a closure: ``run(steps)`` -> seconds (to the device's sync), its
    float32 products at ``precision`` (``torch.set_float32_matmul_precision``; restored after)."""
    import torch

    from pipeline.bayes.objective import kl_weight
    from pipeline.core.devices import to_device
    from pipeline.engine.loop import train_step

    params = [q for q in p.model.parameters() if q.requires_grad]
    state = {"step": 0}
    p.objective.train()

    def run(steps: int) -> float:
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(precision)
        start = time.perf_counter()
        for _ in range(steps):
            state["step"] += 1
            step = state["step"]
            p.before_step(step)
            batch = to_device(p.batch(step, 0, 1), device)
            stats = train_step(p.objective, p.optimizer, params, batch, kl_weight(step, p.anneal_steps), p.clip,
                               None, p.step_context(device))
            stats.tolist()  # the loop reads loss, NLL, KL and the gradient norm back every step
        _sync(device)
        took = time.perf_counter() - start
        torch.set_float32_matmul_precision(before)
        return took

    return run


def batches_check(p, device, steps: int = 20) -> dict:
    """Whether the device data path's batches of a plan's first ``steps`` steps equal ``batches.collate``'s copied
    to the device (before the augmentation, whose draws come from the device's generator)."""
    import torch

    from pipeline.core.devices import to_device
    from pipeline.data import batches

    equal = True
    for step in range(steps):
        idx = p.sampler.indices(step)
        a = p.train_res.gather(idx)
        b = to_device(batches.collate(p.train_fs, idx, p.cfg.max_bags, p.cfg.max_tokens), device)
        equal &= sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    return {"steps": steps, "distinct": p.sampler.size, "equal": bool(equal)}


def recipe_rows(args, device, fdir: Path) -> dict:
    """Part 2: training steps per recipe (preset x data path) of both models at each ``--train-hidden``; the
    device data path's batches against collated ones."""
    import torch

    from pipeline.tasks.mortality.task import plan
    from pipeline.tasks.mortality.train_config import TrainConfig

    rows, check = [], None
    cuda = torch.device(device).type == "cuda"
    for hidden in args.train_hidden:
        runners = {}
        for kind in ("deterministic", "rank1"):
            for preset, res, precision in (r for r in RECIPES if cuda or r[2] == "highest"):
                rows_per_step = args.gpu_rows if preset == "gpu" and args.gpu_rows else None
                cfg = TrainConfig.from_preset(preset, progress=False, model={"lstm_hidden": hidden},
                                              **({"batch_size": rows_per_step} if rows_per_step else {}))
                torch.manual_seed(0)
                p = plan(fdir, kind, cfg, torch.device(device), resident=res)
                if res and check is None:
                    check = batches_check(p, device)
                    print(f"  the device data path's first {check['steps']} batches of {check['distinct']} admissions "
                          f"{'equal' if check['equal'] else 'DIFFER FROM'} collate's", flush=True)
                path = ("device" if res else "collate") + (", TF32" if precision != "highest" else "")
                name = f"{kind} {preset} {path}"
                runners[name] = (step_closure(p, device, precision), p.sampler.size, cfg.batch_size, kind, preset,
                                 path)
        for run, *_ in runners.values():
            run(3)  # warm-up: kernels compiled, the allocator's pools
        per_block = max(1, args.train_steps // 4)
        secs: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(4):
            for name, (run, *_) in runners.items():
                secs[name].append(run(per_block) / per_block)
        for name, (_, distinct, rows_, kind, preset, path) in runners.items():
            step = statistics.median(secs[name])
            rows.append({"hidden": hidden, "kind": kind, "preset": preset, "rows": rows_, "distinct": distinct,
                         "data_path": path, "step_ms": 1e3 * step, "admissions_per_s": distinct / step})
            print(f"  H={hidden:4d} {name:32s} {rows_:5d} rows {1e3 * step:8.2f} ms/step "
                  f"{distinct / step:10,.0f} admissions/s", flush=True)
    return {"rows": rows, "check": check}


def fullscale_part(args, device, tmp: Path) -> dict:
    """Part 5: a whole rank-1 training run at the GPU preset on full-scale-shaped random features."""
    import torch

    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

    start = time.perf_counter()
    fdir = shaped_features(tmp / "full", args.full_train, args.full_val, seed=1)
    made = time.perf_counter() - start
    cfg = TrainConfig.from_preset("gpu", max_epochs=args.full_epochs, patience=None, progress=False,
                                  **({"batch_size": args.gpu_rows} if args.gpu_rows else {}))
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    r = train(fdir, "rank1", cfg, out_dir=tmp / "full-run", tracking=False, device=str(device))
    wall = time.perf_counter() - start
    distinct = cfg.batch_size // 4
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if torch.device(device).type == "cuda" else None
    out = {"train": args.full_train, "val": args.full_val, "epochs": args.full_epochs, "rows": cfg.batch_size,
           "steps": r.steps, "validations": -(-r.steps // cfg.eval_every), "seconds": wall, "features_s": made,
           "admissions_per_s": r.steps * distinct / wall, "best_val_nll": r.best_val_nll, "peak_device_mb": peak}
    print(f"  {args.full_train:,} training admissions x {args.full_epochs} epochs = {r.steps} steps of "
          f"{cfg.batch_size} rows: {wall:.1f} s wall ({out['admissions_per_s']:,.0f} admissions/s, validation "
          f"and checkpoints included)", flush=True)
    return out


def resident_score_rows(args, device, fdir: Path) -> dict:
    """Part 3b: the risk table of ``--score-n`` in-memory admissions, features resident on the device."""
    import torch

    from pipeline.core.contracts import DEFAULT_BATCH
    from pipeline.data import features, resident
    from pipeline.engine import predict
    from pipeline.tasks.mortality import MortalityConfig, build_model, risk

    fs = features.load_split(fdir / "train.parquet")
    torch.manual_seed(0)
    model = build_model("rank1", MortalityConfig(N_TOKENS, N_CONTEXT, components=args.components)).eval().to(device)
    cuda = torch.device(device).type == "cuda"

    def score(part, batch, on_device=True):
        return risk.score_features(model, part, args.samples, 0.01, batch_size=batch,
                                      generator=predict.seeded_generator(0), resident=on_device)

    rows = []
    for batch in args.score_batch:
        score(resident.subset(fs, np.arange(min(len(fs), 2 * batch))), batch)  # warm-up
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        start = time.perf_counter()
        table = score(fs, batch)
        _sync(device)
        secs = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
        rows.append({"batch": batch, "admissions": len(table), "seconds": secs, "per_s": len(table) / secs,
                     "peak_device_mb": peak})
        print(f"  batch {batch:5d}: {len(table):,} admissions x {args.samples * args.components} draws in "
              f"{secs:.2f} s ({len(table) / secs:,.0f}/s)" + (f", peak {peak:,.0f} MB" if peak else ""), flush=True)
    part = resident.subset(fs, np.arange(min(len(fs), args.check_n)))
    a, b = score(part, DEFAULT_BATCH, True), score(part, DEFAULT_BATCH, False)
    diff = float(np.abs(a["risk_mean"].to_numpy() - b["risk_mean"].to_numpy()).max())
    same_refer = bool((a["refer"].to_numpy() == b["refer"].to_numpy()).all())
    print(f"  {len(part):,} admissions at the contract's batching, resident against collated on the CPU: largest "
          f"|risk_mean| difference {diff:.2e}, refer flags {'equal' if same_refer else 'DIFFER'}", flush=True)
    return {"rows": rows, "check": {"admissions": len(part), "batch": DEFAULT_BATCH, "max_abs_risk_diff": diff,
                                    "refer_equal": same_refer}}


# ---------------------------------------------------------------------------- docs/performance.md's text

TARGETS = {"rank1": 50_000, "deterministic": 150_000}  # issue 38: distinct admissions/s at the GPU preset
SCORE_TARGET_S, FULL_TARGET_S = 1.0, 60.0  # issue 38: scoring 58,976 x 100 draws; full-scale rank-1 training


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def render_train(result: dict, c: dict) -> str:
    """Part 2's table, its verdicts against the targets and the batches' check."""
    from benchmarks import report

    rows, check = result["rows"], result.get("check")
    body = [[str(x["hidden"]), x["kind"], x["preset"], x["data_path"], f"{x['rows']:,}", f"{x['distinct']:,}",
             f"{x['step_ms']:.2f}", f"{x['admissions_per_s']:,.0f}"] for x in rows]
    lines = ["**2. Training step** of the mortality plan (batch, OOV augmentation, forward, loss, backward, clipping, "
             f"Adam, the loop's statistics; median over 4 interleaved blocks of {max(1, c['train_steps'] // 4)} "
             "steps); `collate`: batches built on the CPU and copied, `device`: the device data path; TF32: float32 "
             "products in TF32 (`torch.set_float32_matmul_precision(\"high\")`; the default is float32):", "",
             report.table(["LSTM units", "model", "preset", "data path", "rows", "distinct admissions", "ms/step",
                           "admissions/s"], body), ""]
    for x in rows:
        if x["preset"] == "gpu" and x["data_path"].startswith("device") and x["kind"] in TARGETS and x["rows"] >= 1024:
            base = next((y for y in rows if (y["hidden"], y["kind"], y["preset"], y["data_path"])
                         == (x["hidden"], x["kind"], "default", "collate")), None)
            gain = f", {x['admissions_per_s'] / base['admissions_per_s']:.1f}x the default preset's" if base else ""
            lines.append(f"- {x['kind']} (H = {x['hidden']}) at the GPU preset on the {x['data_path']} data path: "
                         f"{x['admissions_per_s']:,.0f} admissions/s{gain} (target {TARGETS[x['kind']]:,}/s: "
                         f"{_met(x['admissions_per_s'] >= TARGETS[x['kind']])}).")
    if check:
        lines.append(f"- The device data path's batches of the first {check['steps']} steps ({check['distinct']} "
                     f"admissions each) {'equal' if check['equal'] else 'differ from'} `batches.collate`'s copied to "
                     "the device (tensors, before the augmentation).")
    return "\n".join(lines)


def render_resident(res: dict, draws: int) -> str:
    """Part 3b's table: resident scoring per batch size, and the check against collated batches."""
    from benchmarks import report

    def verdict(x):  # the target is for a MIMIC-III-sized cohort at 100 draws
        return _met(x["seconds"] <= SCORE_TARGET_S) if x["admissions"] >= 58_976 and draws >= 100 else "-"

    body = [[f"{x['batch']:,}", f"{x['admissions']:,}", f"{x['seconds']:.2f}", f"{x['per_s']:,.0f}",
             f"{x['peak_device_mb']:,.0f}" if x.get("peak_device_mb") else "-", verdict(x)] for x in res["rows"]]
    ck = res["check"]
    return "\n".join([
        f"The same admissions in memory, their features resident on the device (`risk.score_features`, "
        f"{draws} draws, the risk table out; target for 58,976 admissions x 100 draws <= {SCORE_TARGET_S:.0f} s; "
        "the draws depend on the batching, so a batch other than the contract's 128 gives other draws of the same "
        "posterior):", "",
        report.table(["admissions a batch", "admissions", "seconds", "admissions/s", "peak MB", "target"], body), "",
        f"Batches gathered from the resident features against batches collated on the CPU and copied, the same "
        f"model on the same device, {ck['admissions']:,} admissions at the contract's batching ({ck['batch']}), one "
        f"generator seed: largest risk difference {ck['max_abs_risk_diff']:.1e}, refer flags "
        f"{'equal' if ck['refer_equal'] else 'different'}."])


def render_fullscale(f: dict) -> str:
    """Part 5's sentence."""
    peak = f", peak device memory {f['peak_device_mb']:,.0f} MB" if f.get("peak_device_mb") else ""
    return (f"**5. Full scale**: rank-1 trained at the GPU preset ({f['rows']:,} rows a step) on random features of "
            f"full-scale MIMIC-III's shape ({f['train']:,} training, {f['val']:,} validation admissions) for "
            f"{f['epochs']} epochs of distinct admissions ({f['steps']:,} steps, {f['validations']} validations, "
            f"checkpoints and the final validation at the score samples included): **{f['seconds']:.1f} s** wall "
            f"({f['admissions_per_s']:,.0f} admissions/s{peak}; "
            + (f"target <= {FULL_TARGET_S:.0f} s: {_met(f['seconds'] <= FULL_TARGET_S)})." if f["train"] >= 46_000
               else "a smaller run: the target is for full scale).") + f" Best validation NLL {f['best_val_nll']:.4f} "
            "(random features: no signal to learn; the run's cost, not its fit).")
