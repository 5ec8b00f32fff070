"""Learning rates tuned per method family (`rl.lr_tuning`; issue 28 item 4).

One Adam learning rate for every method favours the methods it was tuned on: a step built from 16
prompts (GRPO G=16 at 256 rollouts) and one built from 256 (REINFORCE at G=1) are not the same
noise at the same lr. So each family's representative method (`rl.lr_tuning.families`) trains
`steps` steps at lr = factor x rl.lr for each factor of `grid`, with the same steps (a method's
`steps_factor` does not apply: BASIS tunes at full length) and the same `rl.rollouts_per_step`
for every family, and is scored by the evaluation's protocol (mean@16 at tiny and small) on the
validation split (`sparserl.tasks.validation`: pool-side problems in neither the pool, the
corpus nor a benchmark). The best factor, averaged over `seeds`, is the lr of every run of the
family; a tie goes to the smaller factor: at an equal score the smaller Adam step is the safer
one, since the runs it sets train longer than the tuning runs and a larger step that gained
nothing measurable only risks more drift.

A method's family comes from its spec (`lr_family`): the estimator first where it sets the
baseline (critic, BASIS, V0.5's prior, REINFORCE-style single rollouts), then, for the
group-baseline estimators, DAPO's dynamic sampling, the loss (GSPO, GPG) and RLOO versus GRPO. So
the BASIS grid's rows keep their estimator's lr under every loss. Files: results/<scale>/tuning/
<family>/x<factor>/seed<s>/ (a run and its validation.parquet), tuning/lr.parquet (every factor)
and tuning/lr.json (the chosen lr per family, read by the trainer).
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.config import ConfigError
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths, RunPaths, rl_engine

log = get_logger(__name__)

FAMILIES = ("grpo", "rloo", "dapo", "gspo", "gpg", "reinforce", "basis", "v05", "critic")
REINFORCE_ESTIMATORS = ("vanilla", "reinforce_pp", "negative_only")  # one rollout, no group baseline
VALIDATION = "validation"  # the split's name as a benchmark (evaluation.overrides.validation applies)
# the settings of rl.lr_tuning that choose which tuning runs exist, not what one run does
RUN_LIST_KEYS = ("enabled", "grid", "families", "seeds", "validation_size")


def lr_family(m) -> str:
    """The family whose tuned lr method spec `m` trains with (one of FAMILIES)."""
    if m.needs_critic:
        return "critic"
    if "reference" in m.needs:
        return "basis"
    if "prior" in m.needs or m.osla is not None:
        return "v05"
    if m.estimator in REINFORCE_ESTIMATORS:
        return "reinforce"
    if m.dynamic_sampling.enabled:
        return "dapo"
    if m.loss.type in ("gspo", "gpg"):
        return m.loss.type
    if m.estimator == "gpg":
        return "gpg"
    return "rloo" if m.estimator == "rloo" else "grpo"


def settings(cfg: dict) -> dict | None:
    """`rl.lr_tuning` when it is enabled (the schema requires its keys then), else None."""
    s = (cfg.get("rl") or {}).get("lr_tuning") or {}
    return s if s.get("enabled") else None


def base_lr(cfg: dict) -> float:
    """rl.lr, the rate the grid's factors multiply (the trainer's default when unset)."""
    return float(cfg["rl"].get("lr", 1e-4))


def factor_label(factor: float) -> str:
    """A grid factor as a folder name and wildcard: 0.5 -> '0.5', 1.0 -> '1'."""
    return f"{float(factor):g}"


def grid_factor(cfg: dict, label: str) -> float:
    """The factor of `rl.lr_tuning.grid` whose label is `label`; ConfigError naming the grid otherwise."""
    s = settings(cfg) or {}
    for f in s.get("grid", []):
        if factor_label(f) == factor_label(float(label)):
            return float(f)
    raise ConfigError(f"factor {label!r} is not in rl.lr_tuning.grid {s.get('grid')}; use one of "
                      f"{[factor_label(f) for f in s.get('grid', [])]}")


def check(cfg: dict) -> dict | None:
    """The enabled settings after the checks a schema cannot make (each error names the key and
    the fix): the local engine and procedural tasks, a representative per family of every method
    in rl.methods, each representative a method of the family it stands for, and a rollout budget
    every representative's group size divides."""
    s = settings(cfg)
    if s is None:
        return None
    from sparserl.methods.spec import load_method, prompts_per_step
    if rl_engine(cfg) != "local":
        raise ConfigError("rl.lr_tuning: tuning runs on the local trainer; set rl.lr_tuning.enabled: false "
                          f"with rollout.backend {cfg['rollout']['backend']!r}")
    if cfg["tasks"].get("source") != "procedural":
        raise ConfigError("rl.lr_tuning: the validation split is drawn from procedural tasks; set "
                          "rl.lr_tuning.enabled: false with tasks.source "
                          f"{cfg['tasks'].get('source')!r}")
    fams = s["families"]
    for fam, rep in fams.items():
        if fam not in FAMILIES:
            raise ConfigError(f"rl.lr_tuning.families: unknown family {fam!r}; families: {', '.join(FAMILIES)}")
        m = load_method(rep)
        if lr_family(m) != fam:
            raise ConfigError(f"rl.lr_tuning.families.{fam}: method {rep!r} is of family "
                              f"{lr_family(m)!r}, not {fam!r}; name a method of that family")
        prompts_per_step(m, cfg["rl"]["rollouts_per_step"])
    missing: dict[str, list[str]] = {}
    for name in cfg["rl"]["methods"]:
        fam = lr_family(load_method(name))
        if fam not in fams:
            missing.setdefault(fam, []).append(name)
    if missing:
        fam, names = next(iter(missing.items()))
        raise ConfigError(f"rl.lr_tuning.families has no representative of family {fam!r} (rl.methods: "
                          f"{', '.join(names)}); add e.g. `{fam}: {names[0]}` to rl.lr_tuning.families")
    return s


def run_paths(cfg: dict, family: str, factor: float, seed: int | str) -> RunPaths:
    s = settings(cfg)
    return RunPaths(Paths(cfg).tuning(family, f"x{factor_label(factor)}", f"seed{seed}"),
                    s["families"][family], seed, engine="local")


def validation_table(cfg: dict, family: str, factor: float, seed: int | str) -> Path:
    return run_paths(cfg, family, factor, seed).dir / "validation.parquet"


def tuning_config(cfg: dict, lr: float) -> dict:
    """The config a tuning run trains with: rl.lr set to `lr`, `lr_tuning.steps` steps, no
    intermediate evaluation, tuning off (the run reads no tuned lr)."""
    out = copy.deepcopy(cfg)
    rl = out["rl"]
    s = rl.pop("lr_tuning")
    rl.update(lr=float(lr), steps=int(s["steps"]), eval_fractions=[])
    return out


def run_settings(cfg: dict, method) -> dict:
    """What one tuning run's result depends on (its rule's key): the run's rl settings without
    the lists that only choose which runs exist."""
    from sparserl.methods.spec import run_settings as rl_run_settings
    rl = rl_run_settings(cfg["rl"], method)
    rl["lr_tuning"] = {k: v for k, v in rl["lr_tuning"].items() if k not in RUN_LIST_KEYS}
    return rl


def tune_run(cfg: dict, family: str, factor: float, seed: int, threads: int = 1) -> pd.DataFrame:
    """One tuning run (resumable, the RL trainer's own loop), then its final policy on the
    validation split (`evaluate_checkpoint`); writes and returns validation.parquet's row."""
    from sparserl.core.artifacts import read_table
    from sparserl.engines.local.trainer import Trainer
    from sparserl.evaluation.evaluate import evaluate_checkpoint
    s = check(cfg)
    if s is None:
        raise ConfigError("lr-tune-run: rl.lr_tuning.enabled is not true in the config")
    if family not in s["families"]:
        raise ConfigError(f"lr-tune-run: family {family!r} is not under rl.lr_tuning.families "
                          f"({', '.join(s['families'])})")
    lr = float(factor) * base_lr(cfg)
    rp = run_paths(cfg, family, factor, seed)
    tcfg = tuning_config(cfg, lr)
    trainer = Trainer(tcfg, rp.method, seed, threads=threads, run_paths=rp)
    trainer.steps = int(s["steps"])  # the same steps for every family: no steps_factor here
    trainer.run()
    valid = read_table(Paths(cfg).validation_split())
    extra = {"family": family, "method": rp.method, "factor": float(factor), "lr": lr, "seed": int(seed),
             "steps": trainer.steps, "rollouts_per_step": int(cfg["rl"]["rollouts_per_step"])}
    return evaluate_checkpoint(cfg, str(rp.final), rp.dir / "validation.parquet",
                               f"{family} x{factor_label(factor)} seed{seed}", threads=threads,
                               extra_cols=extra, benchmarks={VALIDATION: valid})


def choose(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (family, factor): validation accuracy averaged over seeds, and `chosen` True on
    each family's best factor; among equal accuracies the smaller factor (module docstring)."""
    # greedy and pass@k beside the deciding score, where the evaluation wrote them: a factor that
    # wins by sharpening alone shows a flat greedy and a falling pass@k
    beside = {f"validation_{c}": (c, "mean") for c in ("greedy_accuracy", "pass_at_k") if c in table}
    agg = (table.groupby(["family", "factor"], sort=True)
           .agg(method=("method", "first"), lr=("lr", "first"), seeds=("seed", "nunique"),
                validation_accuracy=("accuracy", "mean"),
                validation_accuracy_sd=("accuracy", lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0),
                **beside)
           .reset_index())
    agg["chosen"] = False
    for _, g in agg.groupby("family", sort=False):
        best = g["validation_accuracy"].max()
        ties = g[np.isclose(g["validation_accuracy"], best, rtol=0.0, atol=1e-12)]
        agg.loc[ties["factor"].idxmin(), "chosen"] = True
    return agg


def select(cfg: dict) -> dict:
    """Every tuning run's validation score -> tuning/lr.parquet (one row per family and factor)
    and tuning/lr.json (the chosen lr per family, read by the trainer)."""
    from sparserl.core.artifacts import read_table, write_json, write_table
    s = check(cfg)
    if s is None:
        raise ConfigError("lr-tune-select: rl.lr_tuning.enabled is not true in the config")
    P = Paths(cfg)
    rows = [read_table(validation_table(cfg, fam, f, seed))
            for fam in s["families"] for f in s["grid"] for seed in s["seeds"]]
    table = choose(pd.concat(rows, ignore_index=True))
    write_table(table, P.tuning("lr.parquet"), cfg=cfg,
                extra={"base_lr": base_lr(cfg), "steps": int(s["steps"]),
                       "rollouts_per_step": int(cfg["rl"]["rollouts_per_step"]),
                       "metric": str(rows[0]["metric"].iloc[0]), "validation": str(P.validation_split())})
    from sparserl.methods.spec import load_method
    chosen = table[table["chosen"]].set_index("family")
    out = {"base_lr": base_lr(cfg), "grid": [float(f) for f in s["grid"]], "steps": int(s["steps"]),
           "seeds": list(s["seeds"]), "rollouts_per_step": int(cfg["rl"]["rollouts_per_step"]),
           "families": {fam: {"method": r["method"], "factor": float(r["factor"]), "lr": float(r["lr"]),
                              "validation_accuracy": float(r["validation_accuracy"])}
                        for fam, r in chosen.iterrows()},
           "methods": {m: lr_family(load_method(m)) for m in cfg["rl"]["methods"]}}
    write_json(out, P.tuning("lr.json"), cfg=cfg)
    for fam, r in chosen.iterrows():
        log.info(f"lr {fam}: x{factor_label(r['factor'])} = {r['lr']:.3g} ({r['method']}, validation "
                 f"{r['validation_accuracy']:.3f})")
    return out


def tuned_lr(cfg: dict, method) -> tuple[float, str]:
    """(lr, source) a run of `method` trains with: its family's tuned lr and "tuned" when
    rl.lr_tuning is enabled, else rl.lr and "fixed". A family the tuning has no rate for (a method
    outside rl.methods) keeps rl.lr, with a warning."""
    base = base_lr(cfg)
    if settings(cfg) is None:
        return base, "fixed"
    path = Paths(cfg).tuning("lr.json")
    if not path.is_file():
        raise ConfigError(f"{path}: rl.lr_tuning is enabled but the tuned learning rates are missing; "
                          f"build them first (`snakemake --cores 2 {path}`, rule lr_tuning) or set "
                          "rl.lr_tuning.enabled: false")
    data = json.loads(path.read_text())
    if not math.isclose(float(data["base_lr"]), base, rel_tol=1e-12):
        raise ConfigError(f"{path}: tuned around rl.lr = {data['base_lr']}, but rl.lr is now {base}; "
                          "rerun the tuning (rule lr_tuning) for this rl.lr")
    fam = lr_family(method)
    entry = data["families"].get(fam)
    if entry is None:
        log.warning(f"method {method.name!r}: family {fam!r} has no tuned lr in {path} (not in "
                    f"rl.lr_tuning.families); it trains with rl.lr = {base}")
        return base, "fixed"
    return float(entry["lr"]), "tuned"
