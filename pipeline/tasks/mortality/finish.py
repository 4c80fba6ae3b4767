"""What a mortality run records after training or after a Laplace fit (``Task.finish``), and what subnetwork
Laplace fits a mortality run on (``Task.laplace_data``).

``finish`` predicts the validation split's selection half as scoring predicts (``predict.feature_predictions``:
the run's ``score_samples`` draws, or a Gaussian-logit model's moments), chooses the refer measure and its
threshold and summarises the validation (``validation.validation_summary``: by the true risk where the source is
synthetic), and fits the run's policy on both halves (``validation.fit_run_policy``): the checkpoint's refer
threshold, measure and policy, ``model_info.json``'s validation figures, the metrics logged, and what the command
prints (``policy_lines``); both files record the features' task in words (``task_words``: ``data.task``) and, for a
run without a policy, why (``no_policy``: ``validation.no_policy``). ``laplace_data`` reads the MAP run's training
features (the GGN, a ``max_train`` subsample in batches of similar lengths: ``laplace.laplace_batches``) and its
validation halves (the prior precision on the selection half; the calibration half stays apart for the policy).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.core.contracts import SHIFT_REFERENCE_FILE, VOCAB_FILE
from pipeline.data.task import MORTALITY
from pipeline.tasks.base import Finished, FinishSettings, LaplaceData, RunSpec
from pipeline.tasks.mortality import validation


@dataclass
class MortalityData:
    """The validation data a mortality run is finished on (a training plan's, or a Laplace fit's)."""

    features_dir: Path  # the features the run was trained on (the truth of a synthetic source is found from them)
    val: object  # the validation split's selection half (FeatureSet)
    cal: object  # its calibration half (FeatureSet; empty with calibration_share 0)
    context_vocab: list[str]  # the run's context vocabulary (a per-group refer rule reads its groups from it)
    max_bags: int | None  # the run's cap on the bags read per admission
    max_tokens: int | None  # ... on the tokens per bag
    words: object = None  # what the features predict (data.task.TaskWords; None: in-hospital mortality)
    share: float | None = None  # the run's calibration_share (what the reason for no policy names)


def finish(model, data, s: FinishSettings) -> Finished:
    """See the module docstring; ``data``: a ``MortalityData`` or a training plan (``MortalityPlan.finish_data``)."""
    from pipeline.bayes.referral.config import ReferralConfig
    from pipeline.tasks.mortality import predict
    from pipeline.tasks.mortality.truth import features_true_risk

    data = data.finish_data() if hasattr(data, "finish_data") else data
    pred = predict.feature_predictions(model, data.val, s.samples, s.batch_size, data.max_bags, data.max_tokens,
                                       predict.seeded_generator(s.draws_seed))  # (S, K, N), its summary
    config = replace(s.referral or ReferralConfig(), fraction=s.refer_fraction)
    policy = validation.fit_run_policy(model, data.val, data.cal, samples=s.samples, batch_size=s.batch_size,
                                       max_bags=data.max_bags, max_tokens=data.max_tokens, seed=s.seed,
                                       context_vocab=data.context_vocab, config=config, words=data.words)
    said = {"task_words": (data.words or MORTALITY).to_json(),
            "no_policy": None if policy else validation.no_policy(data.val, data.cal, config, data.share, data.words)}
    val = validation.validation_summary(pred.logits, data.val.label, s.refer_fraction, summary=pred.summary,
                                        true_risk=features_true_risk(data.features_dir, data.val),
                                        model_kind=s.model_kind)
    return Finished(artifacts=shift_artifacts(policy, data.cal, data.features_dir, s.seed),
                    checkpoint={**val.checkpoint_entries(), "policy": policy and policy.to_dict(), **said},
                    info={"policy": policy and policy.to_dict(arrays=False), **val.info(), **said}, metrics=val.scalars,
                    val_nll=val.metrics["nll"], val_metrics=dict(val.metrics),
                    lines=policy_lines(policy, said["no_policy"]),
                    refer_threshold=val.refer_threshold, refer_measure=val.refer_measure.value, policy=policy,
                    score_samples=s.samples)


def shift_artifacts(policy, cal, features_dir, seed: int) -> dict:
    """The run's shift reference (``shift.reference_of``: its calibration half's outputs and a feature sample) as
    a ``Finished.artifacts`` entry ({} without a policy)."""
    from pipeline.core import fileio
    from pipeline.tasks.mortality.shift import reference_of

    if policy is None:
        return {}
    ref = reference_of(policy, cal, fileio.read_json(Path(features_dir) / VOCAB_FILE), seed)
    return {} if ref is None else {SHIFT_REFERENCE_FILE: ref.save}


def policy_lines(policy, why: str | None = None) -> list[str]:
    """How a run turns its risks into decisions, in a few lines; without a policy, why (``why``:
    ``validation.no_policy``'s words; None: not known)."""
    if policy is None:
        return [f"no calibration: {why or 'the validation halves could not fit a policy'}; the run has no "
                "recalibration, decision threshold or refer rule and scores with no promise"]
    return policy.lines()


def laplace_data(run, data_dir, cfg) -> LaplaceData:
    """What Laplace fits the mortality MAP run ``run`` on (see the module docstring): its features (``data_dir``,
    else the run's; its vocabulary must be the run's), with its caps and its L2 (the SWAG baseline's)."""
    from pipeline.data import features
    from pipeline.tasks.mortality.inputs import split_validation
    from pipeline.tasks.mortality.laplace import laplace_batches
    from pipeline.tasks.mortality.train_config import TrainConfig

    fdir = run.resolve_features(data_dir)
    values = run.model.value_channel  # a value-channel model reads bag_values and needs it
    train_fs = features.load_split(fdir / "train.parquet", values=values)
    val_all = features.load_split(fdir / "val.parquet", values=values)
    share = float(run.train_config.get("calibration_share", 0.0))  # the MAP run's halves: it chose its checkpoint
    val_fs, cal_fs = split_validation(val_all, share)  # on the selection half; calibration stays apart
    for fs in (train_fs, val_fs, cal_fs):
        fs.check_vocab(len(run.vocab["tokens"]), len(run.vocab["context"]))
        if values:
            fs.require_values()
    caps = {"max_bags": run.info.max_bags, "max_tokens": run.info.max_tokens}
    train, val, n_used = laplace_batches(run.model, train_fs, val_fs, replace(cfg, **caps))
    map_train = run.train_config
    refer_fraction = map_train.get("refer_fraction", TrainConfig.refer_fraction)  # the MAP run's
    seed = (run.params or {}).get("train.seed", map_train.get("seed"))
    vocab_sizes = {"tokens": len(run.vocab["tokens"]), "context": len(run.vocab["context"])}
    data = MortalityData(fdir, val_fs, cal_fs, run.vocab["context"], **caps, words=run.words, share=share)
    return LaplaceData(
        train=train, val=val, n_train=len(train_fs), n_used=n_used, n_val=len(val_fs), data=data,
        changes={**caps, "swag_l2": float(map_train.get("l2", cfg.swag_l2))},  # the MAP run's penalty
        train_config={**caps, "seed": seed, "refer_fraction": refer_fraction, "calibration_share": share},
        params={"train": {"seed": seed}, "n_train": len(train_fs), "n_val": len(val_fs)}, tags={},
        experiment=None, refer_fraction=refer_fraction, features_dir=fdir,
        files={VOCAB_FILE: run.vocab},  # the MAP run's vocabulary (the features' may differ)
        entries={"vocab_sizes": vocab_sizes})


# ---------------------------------------------------------------------------- a training plan's run


def run_spec(plan) -> RunSpec:
    """How a mortality training run is filed (``runs/train/<run id>``, untracked ``<kind>-s<seed>``) and tracked: the
    default experiment, its settings as params, its features (copied, tagged, the pyfunc's)."""
    from pipeline.bayes.referral.config import ReferralConfig

    cfg, mcfg = plan.cfg, plan.entries()["model_config"]
    train_params = {k: v for k, v in cfg.to_dict().items() if k != "model"}  # model: logged apart
    params = {"model_kind": plan.model_kind, "model": mcfg, "train": train_params,
              "referral": (plan.referral or ReferralConfig()).to_dict(), "n_train": len(plan.train_fs),
              "n_val": len(plan.val_fs), "world_size": plan.world, "distinct_per_step": plan.sampler.size}
    return RunSpec(folder="train", untracked=f"{plan.model_kind}-s{cfg.seed}", experiment=None, run_name=None,
                   params=params, tags={}, features_dir=plan.features_dir)


def check_resume(plan, ckpt: dict, path: Path) -> None:
    """Refuse a ``last.pt`` of another model or other training settings (only the budget, ``max_steps`` /
    ``patience`` / ``max_epochs``, and the output settings may change), or one already at the budget's end."""
    from pipeline.core.configs import config_dict, invalid
    from pipeline.core.errors import TrainError
    from pipeline.tasks.mortality.config import saved_config
    from pipeline.tasks.mortality.train_config import FORMER_DEFAULTS, TrainConfig

    cfg = plan.cfg
    saved_model = config_dict(saved_config(ckpt["model_config"]))  # settings added since then: defaults
    if ckpt["model_kind"] != plan.model_kind or saved_model != config_dict(plan.model_config):
        raise TrainError(f"{path}: checkpoint is a {ckpt['model_kind']} model with other settings; "
                         "resume with the same model settings")
    free = ("max_steps", "patience", "max_epochs", "patience_epochs", "max_minutes", "progress",
            "threads")  # the budget and output may change on resume
    # settings added since then: their defaults, or the former default of one that changed since
    saved = {**TrainConfig().to_dict(), **FORMER_DEFAULTS, **ckpt["train_config"]}
    saved = {k: v for k, v in saved.items() if k not in free}
    now = {k: v for k, v in cfg.to_dict().items() if k not in free}
    if saved != now:
        diff = sorted(k for k in now if saved.get(k) != now[k])
        raise invalid(cfg, f"{path}: training settings differ from the checkpoint's ({', '.join(diff)}); only the "
                           "budget (max_steps, patience, max_epochs) may change", "max_steps", "patience",
                      "max_epochs", *diff, error=TrainError)
    if ckpt["step"] >= plan.last_step:
        limit = (f"max_steps {plan.last_step}" if plan.ceiling == "max_steps" else
                 f"{plan.last_step}, the last step of max_epochs {cfg.max_epochs:g}")
        raise invalid(cfg, f"{path}: already at step {ckpt['step']} >= {limit}", plan.ceiling, error=TrainError)


def finish_settings(plan) -> FinishSettings:
    """A training run's: the validation predictive at ``score_samples`` draws from the evaluation stream, batches
    of ``eval_batch_size``, the refer fraction and the referral settings of the run."""
    from pipeline.core.seeds import EVAL_STREAM, stream_seed

    cfg = plan.cfg
    return FinishSettings(samples=cfg.score_samples, batch_size=cfg.eval_batch_size, seed=cfg.seed,
                          draws_seed=stream_seed(cfg.seed, EVAL_STREAM), model_kind=plan.model_kind,
                          refer_fraction=cfg.refer_fraction, referral=plan.referral)
