"""Training of the mortality models: loss, loop, checkpoints, resume, distributed data parallel.

Recipe (Dusenberry et al. 2020, MIMIC-III): loss = NLL + min(1, step / anneal_steps) · KL / N_train
+ l2 · model.l2_penalty(); Adam (lr 3e-4); global-norm clipping 7.3. A step sees
``batch_size`` rows in total: ``batch_size // K`` distinct admissions tiled K times by the model
(K = model.components; 16 x 4 = 64 for rank-1, 64 distinct admissions for K = 1 models), as the
paper keeps the tiled batch constant. NLL ``average`` = mean over the K member blocks of the
per-member BCE; ``mixture`` = -log mean_k p_k(y). Validation every ``eval_every`` steps scores
the mixture NLL over S·K draws (``eval_samples``, per-member sampling, a fixed evaluation seed
so draws are common across evaluations); the best one is kept in ``best.pt``.

Determinism and resume: the batch of step s is a pure function of (seed, s) (``TrainSampler``),
evaluation runs under ``torch.random.fork_rng`` so it never moves the training stream, and
``last.pt`` (model, optimizer, step, best-so-far, every rank's RNG states, configs) is written
atomically at every evaluation and at the end. ``resume=True`` continues from it and ends with
the same weights and metrics as an uninterrupted run (bit for bit on the same machine and
thread count). One caveat: a run stopped by ``max_steps`` at a step that is not a multiple of
``eval_every`` was validated there, which the uninterrupted run skips, so its best checkpoint
may differ; the final weights and final validation NLL do not.

Distributed: under ``torchrun`` (RANK / WORLD_SIZE set) the model is wrapped in
DistributedDataParallel (gloo on CPU); each rank takes a contiguous, disjoint shard of the
global batch, so gradients (averaged by DDP) equal the single-process ones. Only rank 0
evaluates, tracks and writes checkpoints.
"""

from __future__ import annotations

import logging
import math
import os
import random
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pipeline import data, io, metrics, predict
from pipeline.tracking import make_tracker, redact_json

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1  # bump when the checkpoint layout changes
EVAL_STREAM = 1  # stream id of the evaluation draws (fixed: common random numbers across evaluations)
TRAIN_STREAM = 2  # stream id of the training draws (one stream per rank)


class NllMode(str, Enum):
    """Likelihood term of the training loss."""

    AVERAGE = "average"  # mean over draws of each draw's BCE (deep-ensemble style, the paper's default)
    MIXTURE = "mixture"  # -log mean_d p_d(y): tighter bound, couples the components


class Preset(str, Enum):
    """Named size presets (explicit settings override them)."""

    DEFAULT = "default"  # small: trains in minutes on 2 CPU cores
    PAPER = "paper"  # paper scale: LSTM 256, more steps


PRESETS: dict[Preset, dict[str, Any]] = {
    Preset.DEFAULT: {},
    Preset.PAPER: {"max_steps": 20_000, "eval_every": 1_000, "anneal_steps": 5_000,
                   "model": {"lstm_hidden": 256, "embedding_dim": 32}},
}


@dataclass
class TrainConfig:
    """Training settings; ``model`` holds MortalityConfig overrides (vocab sizes come from vocab.json)."""

    seed: int = 0  # seeds initialisation, batch order and weight draws
    max_steps: int = 4_000  # optimizer steps in total (a resumed run continues up to it)
    batch_size: int = 64  # rows per step after tiling: batch_size // K distinct admissions
    lr: float = 3e-4  # Adam learning rate
    clip: float = 7.3  # global gradient-norm clip (0 disables)
    nll: NllMode = NllMode.AVERAGE  # likelihood term: average | mixture
    anneal_steps: int = 1_000  # KL weight min(1, step / anneal_steps); 0 = full weight at once
    l2: float = 1e-4  # factor of model.l2_penalty() (sum of squared deterministic weights)
    train_samples: int = 1  # Monte Carlo samples per component in a training step
    eval_every: int = 250  # validate (and checkpoint) every this many steps, and at the end
    eval_samples: int = 2  # samples per component in periodic validation (cheap)
    score_samples: int = 25  # samples per component for the final validation, refer threshold and pyfunc
    eval_batch_size: int = 256  # admissions per evaluation forward pass
    refer_fraction: float = 0.1  # refer the most uncertain fraction of validation (sets the MI threshold)
    max_bags: int | None = None  # keep only the most recent bags of an admission (None: all)
    max_tokens: int | None = None  # keep at most this many tokens per bag (None: all)
    log_every: int = 10  # log loss, NLL and KL to MLflow every this many steps
    progress: bool = True  # rich progress bar (only on a TTY, rank 0)
    threads: int | None = None  # torch intra-op threads (None: torch's default; 1 is fastest on busy small CPUs)
    model: dict[str, Any] = field(default_factory=dict)  # MortalityConfig overrides, e.g. {"lstm_hidden": 64}

    def __post_init__(self) -> None:
        if self.nll not in {m.value for m in NllMode}:
            raise ValueError(f"TrainConfig.nll must be one of {[m.value for m in NllMode]}, got {self.nll!r}")
        self.nll = NllMode(self.nll)
        for name in ("max_steps", "batch_size", "train_samples", "eval_every", "eval_samples", "score_samples",
                     "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.clip < 0 or self.l2 < 0 or self.anneal_steps < 0:
            raise ValueError("TrainConfig: lr must be > 0 and clip, l2, anneal_steps >= 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"TrainConfig.threads must be >= 1, got {self.threads}")
        if not 0.0 <= self.refer_fraction < 1.0:
            raise ValueError(f"TrainConfig.refer_fraction must lie in [0, 1), got {self.refer_fraction}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["nll"] = self.nll.value
        return d

    @classmethod
    def from_preset(cls, preset: Preset | str = Preset.DEFAULT, **overrides) -> "TrainConfig":
        """Preset values, then ``overrides`` (``model`` overrides are merged, not replaced)."""
        if preset not in {p.value for p in Preset}:
            raise ValueError(f"preset must be one of {[p.value for p in Preset]}, got {preset!r}")
        values = {k: (dict(v) if isinstance(v, dict) else v) for k, v in PRESETS[Preset(preset)].items()}
        model = {**values.pop("model", {}), **overrides.pop("model", {})}
        return cls(**{**values, **overrides, "model": model})


@dataclass
class TrainResult:
    """What a training run produced."""

    run_id: str | None  # MLflow run id (None without tracking, and on ranks > 0)
    best_val_nll: float  # best periodic validation NLL (eval_samples draws per component)
    best_step: int  # step of the best checkpoint
    final_val_nll: float  # validation NLL of the last step
    steps: int  # steps completed
    refer_threshold: float | None  # MI threshold stored with the model (rank 0)
    out_dir: Path  # checkpoint directory
    last_checkpoint: Path  # last.pt
    best_checkpoint: Path  # best.pt (with the refer threshold)
    best_metrics: dict = field(default_factory=dict)  # validation metrics of best.pt at score_samples


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the message names the step and the last good checkpoint."""


# ---------------------------------------------------------------------------- model and loss


def model_config(overrides: dict, vocab_sizes: dict):
    """MortalityConfig from vocab sizes and overrides (unknown keys raise a clear error)."""
    from pipeline.models import MortalityConfig

    known = {f.name for f in fields(MortalityConfig)} - {"token_vocab", "context_vocab"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown model setting(s) {unknown}; MortalityConfig has {sorted(known)}")
    return MortalityConfig(token_vocab=vocab_sizes["tokens"], context_vocab=vocab_sizes["context"], **overrides)


def config_dict(cfg) -> dict:
    """JSON-able dict of a dataclass config (str enums -> values)."""
    return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(cfg).items()}


class Objective(nn.Module):
    """Wraps the model so that NLL, KL and L2 are all computed in one forward (DDP-friendly)."""

    def __init__(self, model: nn.Module, nll: NllMode, n_train: int, l2: float, samples: int) -> None:
        super().__init__()
        self.model, self.nll, self.n_train, self.l2, self.samples = model, NllMode(nll), n_train, l2, samples

    def forward(self, batch: dict, kl_weight: float) -> dict[str, torch.Tensor]:
        logits = self.model(batch, samples=self.samples)  # (S·K, B)
        y = batch["label"].unsqueeze(0).expand_as(logits)  # (B,) -> (S·K, B)
        ll = -F.binary_cross_entropy_with_logits(logits, y, reduction="none")  # (S·K, B) log p_d(y)
        if self.nll is NllMode.AVERAGE:
            nll = -ll.mean()
        else:
            nll = -(torch.logsumexp(ll, 0) - math.log(ll.shape[0])).mean()
        kl = self.model.kl()
        penalty = self.model.l2_penalty() if self.l2 else torch.zeros((), dtype=nll.dtype)
        loss = nll + kl_weight * kl / self.n_train + self.l2 * penalty
        return {"loss": loss, "nll": nll.detach(), "kl": kl.detach(), "l2": penalty.detach()}


def kl_weight(step: int, anneal_steps: int) -> float:
    """min(1, step / anneal_steps) for the 1-based step; 1 when annealing is off."""
    return 1.0 if anneal_steps <= 0 else min(1.0, step / anneal_steps)


# ---------------------------------------------------------------------------- distributed


@dataclass
class Dist:
    """Process group membership (world 1 = plain single process)."""

    rank: int = 0  # this process
    world: int = 1  # processes in the group
    owned: bool = False  # this module initialised the group (and destroys it at the end)

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    """Join the gloo group when torchrun's RANK / WORLD_SIZE say so."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), owned=owned)


def _from_rank0(value: float, d: Dist) -> float:
    """Rank 0's ``value`` on every rank."""
    if d.world <= 1:
        return value
    import torch.distributed as dist

    box = torch.tensor([value], dtype=torch.float64)
    dist.broadcast(box, src=0)
    return float(box[0])


def _all_mean(values: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.world > 1:
        import torch.distributed as dist

        dist.all_reduce(values)
        values = values / d.world
    return values


# ---------------------------------------------------------------------------- RNG and checkpoints


def stream_seed(seed: int, stream: int, rank: int = 0) -> int:
    """Independent 63-bit torch seed for (run seed, stream, rank)."""
    return int(np.random.SeedSequence([seed, stream, rank]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def rng_state() -> dict:
    """Every RNG the run touches (torch CPU, numpy global, python)."""
    np_state = np.random.get_state(legacy=False)
    np_state = {**np_state, "state": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                      for k, v in np_state["state"].items()}}
    return {"torch": torch.get_rng_state(), "numpy": np_state, "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np_state = dict(state["numpy"])
    np_state["state"] = {k: (np.asarray(v, dtype=np.uint32) if isinstance(v, list) else v)
                         for k, v in np_state["state"].items()}
    np.random.set_state(np_state)
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def save_checkpoint(path: Path, payload: dict) -> Path:
    """torch.save to a temp file, then rename (never a half-written checkpoint)."""
    with io.atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def read_checkpoint(path: Path | str) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: checkpoint format {ckpt.get('format')}, expected {CHECKPOINT_FORMAT}")
    return ckpt


def load_model(path: Path | str) -> tuple[nn.Module, dict]:
    """Model (eval mode) and its info dict (kind, configs, refer threshold...) from a checkpoint."""
    from pipeline.models import MortalityConfig, build_model

    ckpt = read_checkpoint(path)
    model = build_model(ckpt["model_kind"], MortalityConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    tc = ckpt["train_config"]
    info = {k: ckpt.get(k) for k in ("model_kind", "model_config", "train_config", "step", "val_nll", "refer_threshold")}
    info.update(score_samples=tc["score_samples"], max_bags=tc["max_bags"], max_tokens=tc["max_tokens"])
    return model, info


# ---------------------------------------------------------------------------- evaluation


def validate(model: nn.Module, val: data.FeatureSet, cfg: TrainConfig, samples: int) -> np.ndarray:
    """Validation logits (S, K, N) with the fixed evaluation seed (training RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(cfg.seed, EVAL_STREAM))
        return predict.feature_logits(model, val, samples, cfg.eval_batch_size, cfg.max_bags, cfg.max_tokens)


def _progress(enabled: bool, total: int, start: int):
    """A started rich Progress and task id, or (None, None)."""
    if not (enabled and sys.stderr.isatty()):
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   TextColumn("{task.fields[status]}"), transient=True)
    bar.start()
    return bar, bar.add_task("train", total=total, completed=start, status="")


# ---------------------------------------------------------------------------- training


def train(features_dir: Path | str, model_kind: str, cfg: TrainConfig | None = None, *,
          out_dir: Path | str | None = None, resume: bool = False, tracking: bool = True,
          experiment: str | None = None, run_name: str | None = None,
          artifact_location: str | None = None) -> TrainResult:
    """Train ``model_kind`` on ``features_dir`` (train/val Parquet, vocab.json, manifest.json).

    Checkpoints go to ``out_dir`` (default ``runs/train/<MLflow run id>``, untracked
    ``runs/train/<kind>-s<seed>``); an existing ``last.pt`` there is an error unless ``resume``.
    With ``tracking`` the run is logged to MLflow (``experiment``/``run_name``; a resumed run
    continues its MLflow run). Raises ``TrainingDiverged`` on a non-finite loss or gradient.
    """
    from pipeline.models import build_model

    cfg = cfg or TrainConfig()
    features = Path(features_dir)
    if resume and out_dir is None:
        raise ValueError("resume needs the output directory that holds last.pt (--out)")
    d = init_distributed()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    vocab_sizes, train_fs, val_fs = _load_inputs(features)
    mcfg = model_config(cfg.model, vocab_sizes)
    torch.manual_seed(cfg.seed)
    model = build_model(model_kind, mcfg)
    k = predict.components_of(model)
    distinct = cfg.batch_size // k
    if distinct < d.world or distinct % d.world:
        raise ValueError(f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct admissions per step "
                         f"does not split over {d.world} processes")
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sampler = data.TrainSampler(len(train_fs), distinct, cfg.seed)
    state = {"step": 0, "best_val_nll": math.inf, "best_step": 0, "run_id": None, "val_nll": math.nan}
    if resume:
        state = _resume(Path(out_dir) / "last.pt", model, optimizer, model_kind, mcfg, cfg, d)
    else:
        _check_fresh(out_dir)
        torch.manual_seed(stream_seed(cfg.seed, TRAIN_STREAM, d.rank))

    tracker = make_tracker(tracking and d.main, experiment=experiment, run_name=run_name,
                           run_id=state["run_id"], artifact_location=artifact_location)
    base = {"format": CHECKPOINT_FORMAT, "model_kind": model_kind, "model_config": config_dict(mcfg),
            "train_config": cfg.to_dict(), "vocab_sizes": vocab_sizes}
    try:
        if out_dir is None:  # a tracked run gets its own directory, named by its run id
            out_dir = Path("runs") / "train" / _broadcast(tracker.run_id or f"{model_kind}-s{cfg.seed}", d)
            _check_fresh(out_dir)
        out = Path(out_dir)
        if d.main:
            _copy_inputs(features, out)
        if state["step"] == 0:
            train_params = {k: v for k, v in cfg.to_dict().items() if k != "model"}  # model: logged below
            tracker.log_params({"model_kind": model_kind, "model": config_dict(mcfg), "train": train_params,
                                "n_train": len(train_fs), "n_val": len(val_fs), "world_size": d.world,
                                "distinct_per_step": distinct, "features": features.name})
            tracker.set_tag("features_dir", str(features.resolve()))  # evaluate finds the features here
            tracker.set_tag("split_mode", _split_mode(features))  # random | era: compare groups by it
        else:
            tracker.set_tag("resumed_from_step", str(state["step"]))
        ddp = _wrap(Objective(model, cfg.nll, len(train_fs), cfg.l2, cfg.train_samples), d)
        state = _loop(ddp, model, optimizer, sampler, train_fs, val_fs, cfg, d, tracker, base, state, out)
        if d.world > 1:
            import torch.distributed as dist

            dist.barrier()
        result = _finish(model, val_fs, cfg, d, tracker, base, state, out)
    except BaseException:
        tracker.end("FAILED")
        raise
    finally:
        if d.owned:
            import torch.distributed as dist

            dist.destroy_process_group()
    tracker.end("FINISHED")
    return result


def _load_inputs(features: Path) -> tuple[dict, data.FeatureSet, data.FeatureSet]:
    """Vocabulary sizes and the train / val splits (ids checked against the vocabulary)."""
    vocab_file = features / "vocab.json"
    if not vocab_file.exists():
        raise FileNotFoundError(f"{vocab_file}: not found; is {features} the output of `cli.py extract`?")
    vocab = io.read_json(vocab_file)
    sizes = {"tokens": len(vocab["tokens"]), "context": len(vocab["context"])}
    splits = [data.load_split(features / f"{name}.parquet") for name in ("train", "val")]
    for fs in splits:
        fs.check_vocab(sizes["tokens"], sizes["context"])
    return sizes, splits[0], splits[1]


def _split_mode(features: Path) -> str:
    """``random`` / ``era`` (the extraction's split), ``unknown`` without a manifest."""
    manifest = features / "manifest.json"
    cfg = (io.read_json(manifest).get("config") or {}) if manifest.exists() else {}
    return str(cfg.get("split") or "unknown")


def _copy_inputs(features: Path, out: Path) -> None:
    """The run's own vocab.json / manifest.json (artifacts stay right if the features change later)."""
    out.mkdir(parents=True, exist_ok=True)
    if (features / "vocab.json").exists():
        with io.atomic_path(out / "vocab.json") as tmp:
            shutil.copyfile(features / "vocab.json", tmp)
    if (features / "manifest.json").exists():  # strings pass the tracking redaction (DSN passwords, dates)
        io.write_json(out / "manifest.json", redact_json(io.read_json(features / "manifest.json")))


def _check_fresh(out_dir) -> None:
    if out_dir is not None and (Path(out_dir) / "last.pt").exists():
        raise FileExistsError(f"{Path(out_dir) / 'last.pt'} exists; pass resume=True (--resume) or choose another "
                              "output directory")


def _broadcast(value: str, d: Dist) -> str:
    """Rank 0's ``value`` on every rank."""
    if d.world <= 1:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _wrap(objective: Objective, d: Dist) -> nn.Module:
    """DDP around the objective (loss, KL and L2 inside one forward, so DDP sees every use).

    ``find_unused_parameters``: a shard whose admissions all have zero bags skips the LSTM.
    """
    if d.world <= 1:
        return objective
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(objective, find_unused_parameters=True)


def _resume(path: Path, model, optimizer, kind: str, mcfg, cfg: TrainConfig, d: Dist) -> dict:
    from pipeline.models import MortalityConfig

    ckpt = read_checkpoint(path)
    saved_model = config_dict(MortalityConfig(**ckpt["model_config"]))  # settings added since then: defaults
    if ckpt["model_kind"] != kind or saved_model != config_dict(mcfg):
        raise ValueError(f"{path}: checkpoint is a {ckpt['model_kind']} model with other settings; "
                         "resume with the same model settings")
    free = ("max_steps", "progress", "threads")  # may change on resume
    saved = {k: v for k, v in ckpt["train_config"].items() if k not in free}
    now = {k: v for k, v in cfg.to_dict().items() if k not in free}
    if saved != now:
        diff = sorted(k for k in now if saved.get(k) != now[k])
        raise ValueError(f"{path}: training settings differ from the checkpoint's ({diff}); only max_steps may change")
    if ckpt["step"] >= cfg.max_steps:
        raise ValueError(f"{path}: already at step {ckpt['step']} >= max_steps {cfg.max_steps}")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    rngs = ckpt["rng"]
    if len(rngs) == d.world:
        set_rng_state(rngs[d.rank])
    else:
        log.warning("%s was written by %d process(es), resuming with %d: weight draws are reseeded",
                    path, len(rngs), d.world)
        torch.manual_seed(stream_seed(cfg.seed + ckpt["step"], TRAIN_STREAM, d.rank))
    return {k: ckpt[k] for k in ("step", "best_val_nll", "best_step", "run_id", "val_nll")}


def _gather_rng(d: Dist) -> list:
    mine = rng_state()
    if d.world <= 1:
        return [mine]
    import torch.distributed as dist

    out: list = [None] * d.world
    dist.all_gather_object(out, mine)
    return out


def train_step(objective: nn.Module, optimizer, params: list, batch: dict, kl_w: float, clip: float,
               d: Dist | None = None) -> torch.Tensor:
    """One update; returns [loss, nll, kl, grad_norm] (mean over ranks).

    The optimizer does not step when any of them is non-finite (the caller decides what to do).
    """
    parts = objective(batch, kl_w)
    parts["loss"].backward()
    norm = nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
    stats = _all_mean(torch.stack([parts["loss"].detach(), parts["nll"], parts["kl"], norm.detach()]), d or Dist())
    if torch.isfinite(stats).all():
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats


def _loop(ddp, model, optimizer, sampler, train_fs, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict,
          state: dict, out: Path) -> dict:
    params = [p for p in model.parameters() if p.requires_grad]
    bar, task = _progress(cfg.progress and d.main, cfg.max_steps, state["step"])
    last_good = (out / "last.pt", state["step"]) if state["step"] else None
    ddp.train()
    try:
        for step in range(state["step"] + 1, cfg.max_steps + 1):
            batch = data.collate(train_fs, sampler.indices(step - 1, d.rank, d.world), cfg.max_bags, cfg.max_tokens)
            w = kl_weight(step, cfg.anneal_steps)
            stats = train_step(ddp, optimizer, params, batch, w, cfg.clip, d)
            if not torch.isfinite(stats).all():
                raise TrainingDiverged(
                    f"non-finite training loss or gradient at step {step} (loss={stats[0].item()}, "
                    f"grad_norm={stats[3].item()}); weights not updated; {_last_good(last_good)}")
            if step % cfg.log_every == 0:
                tracker.log_metrics({"train_loss": stats[0].item(), "train_nll": stats[1].item(),
                                     "train_kl": stats[2].item(), "kl_weight": w, "grad_norm": stats[3].item()}, step)
            if bar is not None:
                bar.update(task, completed=step, status=f"loss {stats[0].item():.4f}")
            if step % cfg.eval_every == 0 or step == cfg.max_steps:
                try:
                    state = _checkpoint(model, optimizer, val_fs, cfg, d, tracker, base, {**state, "step": step}, out)
                except TrainingDiverged as exc:
                    raise TrainingDiverged(f"{exc}; {_last_good(last_good)}") from None
                last_good = (out / "last.pt", step)
                ddp.train()
    finally:
        if bar is not None:
            bar.stop()
    return state


def _last_good(last_good: tuple[Path, int] | None) -> str:
    if last_good is None:
        return "no checkpoint had been written yet"
    return f"the last good checkpoint is {last_good[0]} (step {last_good[1]})"


def _checkpoint(model, optimizer, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict, state: dict,
                out: Path) -> dict:
    """Validate on rank 0, keep best.pt, write last.pt (all ranks' RNG states gathered).

    Non-finite validation logits stop every rank with ``TrainingDiverged`` before last.pt is touched.
    """
    rngs = _gather_rng(d)
    step = state["step"]
    val_nll = math.nan
    if d.main:
        logits = validate(model, val_fs, cfg, cfg.eval_samples)  # (S, K, N)
        val_nll = metrics.mixture_nll(logits, val_fs.label) if np.isfinite(logits).all() else math.inf
    val_nll = _from_rank0(val_nll, d)
    if not math.isfinite(val_nll):
        raise TrainingDiverged(f"non-finite validation logits at step {step}")
    if not d.main:
        return state
    tracker.log_metrics({"val_nll": val_nll}, step)
    state = {**state, "val_nll": val_nll}
    if val_nll < state["best_val_nll"]:
        state.update(best_val_nll=val_nll, best_step=step)
        save_checkpoint(out / "best.pt", {**base, "model": model.state_dict(), "step": step, "val_nll": val_nll,
                                          "refer_threshold": None})
    save_checkpoint(out / "last.pt", {**base, **state, "run_id": tracker.run_id, "model": model.state_dict(),
                                      "optimizer": optimizer.state_dict(), "rng": rngs})
    return state


def _finish(model, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict, state: dict, out: Path) -> TrainResult:
    """Refer threshold and final metrics from best.pt on validation; artifacts and pyfunc (rank 0)."""
    result = TrainResult(run_id=tracker.run_id, best_val_nll=state["best_val_nll"], best_step=state["best_step"],
                         final_val_nll=state["val_nll"], steps=state["step"], refer_threshold=None, out_dir=out,
                         last_checkpoint=out / "last.pt", best_checkpoint=out / "best.pt")
    if not d.main:
        return result
    best = read_checkpoint(out / "best.pt")
    final_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best["model"])
    logits = validate(model, val_fs, cfg, cfg.score_samples)  # (S, K, N)
    model.load_state_dict(final_state)
    threshold = predict.refer_threshold(metrics.mutual_information(logits), cfg.refer_fraction)
    report = metrics.evaluate_predictions(logits, val_fs.label, n_bootstrap=0)
    scalars = {f"best_val_{k}": v for k, v in report.items()
               if k in ("nll", "auc_pr", "auc_roc", "ece", "brier", "mean_mutual_information")}
    save_checkpoint(out / "best.pt", {**best, "refer_threshold": threshold})
    info = {"model_kind": base["model_kind"], "model_config": base["model_config"],
            "train_config": base["train_config"], "vocab_sizes": base["vocab_sizes"], "best_step": state["best_step"],
            "refer_threshold": threshold, "refer_fraction": cfg.refer_fraction, "score_samples": cfg.score_samples,
            "val_metrics": {k: report[k] for k in ("nll", "auc_pr", "auc_roc", "ece", "brier", "n", "positives")}}
    io.write_json(out / "model_info.json", info)
    io.write_json(out / "train_config.json", {"model_kind": base["model_kind"], **base["train_config"],
                                              "model": base["model_config"]})
    tracker.log_metrics({**scalars, "refer_threshold": threshold}, state["step"])
    for name in ("train_config.json", "model_info.json"):
        tracker.log_artifact(out / name)
    for name in ("vocab.json", "manifest.json"):
        if (out / name).exists():
            tracker.log_artifact(out / name, "features")
    tracker.log_artifact(out / "best.pt", "checkpoint")
    tracker.log_pyfunc(checkpoint=out / "best.pt", vocab=out / "vocab.json", model_info=out / "model_info.json",
                       default_samples=cfg.score_samples)
    result.refer_threshold = threshold
    result.best_metrics = {k: report[k] for k in info["val_metrics"]}
    return result
