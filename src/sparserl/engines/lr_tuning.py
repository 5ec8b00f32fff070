"""Learning rates and step counts chosen on the validation split, per batch setting (`rl.lr_tuning`).

The unit of tuning is a run's batch setting, not its method family: a step built from 16 prompts
(GRPO G=16 at 256 rollouts), one from 64 prompts (G=4, or every `*_mp` run at 256-1,024
rollouts) and one from 256 (REINFORCE at G=1) are not the same gradient noise at the same Adam
step. A setting is (lr family, prompts per step, rollouts per step, trained steps), read off the
method spec (`setting_of`: group size, `prompts_per_step` of the matched-prompts protocol,
`steps_factor`), never from a hand list; methods of one family and setting share its tuning, and
the first of them in rl.methods (its `run_owners` owner) is the method the tuning trains.

For every setting, every absolute rate of `rl.lr_tuning.grid` and every seed of
`rl.lr_tuning.seeds` (two or more), the setting's method trains the steps its RL runs train
(`total_steps`), and its checkpoints at `rl.lr_tuning.checkpoints` (fractions of those steps) are
scored by the evaluation's protocol (mean@16 at small) on the validation split
(`sparserl.tasks.validation`: pool-side problems in neither the pool, the corpus nor a benchmark;
`validation_problems` refuses a split that meets them). The rule that decides is
`validation_argmax` (its docstring); `select` writes its table, tuning/lr.parquet (with lr.csv and
lr.md beside it: per setting and (lr, steps) the seed mean, sd, min and max of validation accuracy,
the choice and whether it sits at the grid's edge) and tuning/lr.json (the choice per setting, which
every RL run of the setting reads through `tuned_lr`). No benchmark problem enters either. A tree
with `rl.lr_tuning.from` (a second start policy's, configs/overlays/start1.yaml) tunes nothing: its
runs read that file, the first tree's choice, so the two starts train the same rates.

A method's family comes from its spec (`lr_family`): the estimator first where it sets the
baseline (critic, BASIS, V0.5's prior, REINFORCE-style single rollouts), then, for the
group-baseline estimators, DAPO's dynamic sampling, the loss (GSPO, GPG) and RLOO versus GRPO.
Files: results/<scale>/tuning/<setting>/lr<lr>/seed<s>/ (a run and its validation.parquet, one
row per checkpoint scored).
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.config import ConfigError
from sparserl.core.logs import get_logger
from sparserl.core.paths import rl_engine
from sparserl.methods.run import Run, resolve_run
# the choice a run reads lives below the engines (methods.run resolves a run with it)
from sparserl.methods.lr_choice import (FAMILIES, REINFORCE_ESTIMATORS, base_lr, borrowed,  # noqa: F401
                                        chosen_path, lr_family, setting_of, settings, tuned_choice,
                                        tuned_lr, tuned_run, tuned_steps)

log = get_logger(__name__)

VALIDATION = "validation"  # the split's name as a benchmark (evaluation.overrides.validation applies)
TABLE_COLUMNS = ("setting", "family", "method", "prompts_per_step", "rollouts_per_step", "lr", "steps",
                 "seeds", "validation_accuracy", "validation_accuracy_sd", "validation_accuracy_min",
                 "validation_accuracy_max", "eligible", "chosen", "lr_at_grid_edge", "steps_at_last_checkpoint")


def lr_label(lr: float) -> str:
    """A grid rate as a folder name and wildcard: 1.25e-05 -> '1.25e-05'."""
    return f"{float(lr):g}"


def grid_lr(cfg: dict, label: str) -> float:
    """The rate of `rl.lr_tuning.grid` whose label is `label`; ConfigError naming the grid otherwise."""
    grid = (settings(cfg) or {}).get("grid", [])
    for lr in grid:
        try:
            if lr_label(lr) == lr_label(float(label)):
                return float(lr)
        except ValueError:
            break
    raise ConfigError(f"lr {label!r} is not in rl.lr_tuning.grid {grid}; use one of "
                      f"{[lr_label(x) for x in grid]}")


def setting_methods(cfg: dict) -> dict[str, list[str]]:
    """Setting label -> the methods of rl.methods in it, in rl.methods order (the first one, a run
    owner, is the method its tuning trains)."""
    from sparserl.methods.spec import load_method, run_owners
    rl = cfg["rl"]
    owners = run_owners(rl["methods"], rl["rollouts_per_step"])
    out: dict[str, list[str]] = {}
    for name in rl["methods"]:
        out.setdefault(setting_of(load_method(owners[name]), rl), []).append(name)
    return out


def check(cfg: dict) -> dict | None:
    """The enabled settings after the checks a schema cannot make (each error names the key and
    the fix): the local engine, procedural tasks, and every method's setting derivable."""
    s = settings(cfg)
    if s is None:
        return None
    if rl_engine(cfg) != "local":
        raise ConfigError("rl.lr_tuning: tuning runs on the local trainer; set rl.lr_tuning.enabled: false "
                          f"with rollout.backend {cfg['rollout']['backend']!r}")
    if cfg["tasks"].get("source") != "procedural":
        raise ConfigError("rl.lr_tuning: the validation split is drawn from procedural tasks; set "
                          "rl.lr_tuning.enabled: false with tasks.source "
                          f"{cfg['tasks'].get('source')!r}")
    if len(set(s["seeds"])) < 2:
        raise ConfigError(f"rl.lr_tuning.seeds {s['seeds']}: the rule averages over two or more seeds; "
                          "list at least two, e.g. [0, 1]")
    setting_methods(cfg)  # a method whose batch cannot be formed fails here, naming it
    return s


def tuner(cfg: dict, setting: str) -> str:
    """The method a setting's tuning trains: the first of rl.methods in it."""
    methods = setting_methods(cfg)
    if setting not in methods:
        raise ConfigError(f"setting {setting!r} is no batch setting of rl.methods; settings: "
                          f"{', '.join(methods)}")
    return methods[setting][0]


def tuning_dir(P, setting: str, lr: float, seed: int | str) -> Path:
    """A tuning run's folder in tree `P` (a `Paths`): tuning/<setting>/lr<lr>/seed<s>."""
    return P.tuning(setting, f"lr{lr_label(lr)}", f"seed{seed}")


def tuning_run(cfg: dict, setting: str, lr: float, seed: int | str, root: str | Path) -> Run:
    """A tuning run: the setting's method at `lr` (`tuning_config`), in `root` (the DAG's, `tuning_dir`)."""
    return resolve_run(tuning_config(cfg, lr), tuner(cfg, setting), seed, root=root, lr=lr)


# the settings of rl.lr_tuning that choose which tuning runs exist, not what one run does
RUN_LIST_KEYS = ("enabled", "grid", "seeds", "validation_size")


def rule_identity(cfg: dict, setting: str) -> dict:
    """What rule lr_tune_run's key hashes, for the setting's runs at every rate (the rate is the
    job's wildcard): the rl settings without the lists that choose which runs exist, the rollout
    settings and the method (all a run's `Run.key` holds) and the evaluation that scores the
    checkpoints. Its value is the one tuning jobs were keyed by before `Run`, so a tree mid-tuning
    does not rerun; the trainer resumes a tuning run by its `Run.key`."""
    from sparserl.methods.spec import load_method, run_settings
    spec = load_method(tuner(cfg, setting))
    rl = run_settings(cfg["rl"], spec)
    rl["lr_tuning"] = {k: v for k, v in rl["lr_tuning"].items() if k not in RUN_LIST_KEYS}
    return {"rl": rl, "rollout": cfg["rollout"], "evaluation": cfg["evaluation"], "method": spec.to_dict()}


def validation_table(P, setting: str, lr: float, seed: int | str) -> Path:
    """A tuning run's validation scores in tree `P` (`tune_run`'s `out`), in its folder."""
    return tuning_dir(P, setting, lr, seed) / "validation.parquet"


def checkpoint_steps(cfg: dict, method) -> list[int]:
    """The steps a tuning run of `method` is scored at: `rl.lr_tuning.checkpoints` of the steps it
    trains (`total_steps`), distinct and ascending; the last is the run's final step."""
    from sparserl.methods.spec import fraction_step, total_steps
    n = total_steps(cfg["rl"], method)
    return sorted({fraction_step(f, n) for f in settings(cfg)["checkpoints"]} | {n})


def min_steps(cfg: dict, methods: list[str]) -> int:
    """The fewest steps runs of `methods` (one setting) may stop at: their last intermediate
    checkpoint that the DAG reads (rl.eval_fractions' snapshots, the BASIS value study's), since
    those are fractions of the horizon `total_steps`, fixed when Snakemake builds its graph."""
    from sparserl.methods.spec import load_method, snapshot_steps, study_snapshot_steps
    rl = cfg["rl"]
    steps = {0}
    for name in methods:
        m = load_method(name)
        steps |= set(snapshot_steps(rl, m))
        for seed in rl["seeds"]:
            steps |= set(study_snapshot_steps(cfg, m, seed))
    return max(steps)


def tuning_config(cfg: dict, lr: float) -> dict:
    """The config a tuning run trains with: rl.lr set to `lr`, its intermediate checkpoints kept at
    `rl.lr_tuning.checkpoints` (the trainer saves rl.eval_fractions), tuning off."""
    out = copy.deepcopy(cfg)
    rl = out["rl"]
    s = rl.pop("lr_tuning")
    rl.update(lr=float(lr), eval_fractions=[float(f) for f in s["checkpoints"] if f < 1])
    return out


def tuning_configs(cfg: dict) -> dict[str, dict]:
    """Config hash -> the config of the tuning runs at each rate of the grid ({} with tuning off):
    the hashes a tuning run's own tables (metrics, per-checkpoint evaluations) carry."""
    from sparserl.core.artifacts import config_hash
    s = settings(cfg)
    out = {}
    for lr in (s or {}).get("grid", []):
        c = tuning_config(cfg, lr)
        out[config_hash(c)] = c
    return out


def _norm(problem: str) -> str:
    return " ".join(str(problem).split())


def guard_validation(cfg: dict, valid: pd.DataFrame, where: Path | str, pool: str | Path, corpus: str | Path,
                     benchmarks: list) -> None:
    """Refuse a validation split that meets a benchmark (the tables `benchmarks`), the RL pool
    (`pool`) or the pre-training corpus (`corpus`): by problem text (whitespace normalised) and by
    the hash split (`procedural.split_of`: no problem on the benchmarks' 'eval' side, all on the
    pool's side). The files are read again here, so the scoring checks what it scores, whatever
    wrote `where`."""
    from sparserl.core.artifacts import read_table
    from sparserl.tasks.procedural import pool_side, split_of, task_split
    split = task_split(cfg["tasks"])
    side = pool_side(split)
    probs = {_norm(p) for p in valid["problem"]}
    sources = [("benchmark " + Path(b).stem, Path(b)) for b in benchmarks]
    sources += [("RL pool", Path(pool)), ("pre-training corpus", Path(corpus))]
    for what, path in sources:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{where}: cannot check the validation split against the {what}: "
                                    f"{path} is missing; build the tasks first")
        met = probs & {_norm(p) for p in read_table(path)["problem"]}
        if met:
            raise ValueError(f"{where}: {len(met)} validation problems are in the {what} ({path}), e.g. "
                             f"{min(met)!r}; no rate may be chosen on them: rebuild the split "
                             "(rule make_validation)")
    off = sorted(p for p in valid["problem"] if split_of(p, split) != side)
    if off:
        raise ValueError(f"{where}: {len(off)} validation problems hash off the pool's side ({side!r}; "
                         f"e.g. {off[0]!r} is on {split_of(off[0], split)!r}, the benchmarks' side is 'eval'); "
                         "rebuild the split (rule make_validation)")


def validation_problems(cfg: dict, path: str | Path, pool: str | Path, corpus: str | Path,
                        benchmarks: list) -> pd.DataFrame:
    """The validation split `path` the scoring uses, after `guard_validation` against the pool,
    corpus and benchmark tables."""
    from sparserl.core.artifacts import read_table
    valid = read_table(path)
    guard_validation(cfg, valid, path, pool, corpus, benchmarks)
    return valid


def tune_run(cfg: dict, setting: str, lr: float, seed: int, out: str | Path, validation: str | Path,
             pool: str | Path, corpus: str | Path, benchmarks: list, threads: int = 1) -> pd.DataFrame:
    """One tuning run (resumable, the RL trainer's own loop) of the setting's method at `lr` in the
    folder of `out`, then each checkpoint of `checkpoint_steps` on the validation split
    `validation` (guarded against `pool`, `corpus` and `benchmarks`); writes `out`, the run's
    validation.parquet (one row per checkpoint, `steps` its training step), and returns it."""
    from sparserl.core.artifacts import write_table
    from sparserl.engines.local.trainer import Trainer
    from sparserl.evaluation.evaluate import evaluate_checkpoint
    from sparserl.grading.verifier import open_verifier
    from sparserl.methods.spec import prompts_per_step
    s = check(cfg)
    if s is None:
        raise ConfigError("lr-tune-run: rl.lr_tuning.enabled is not true in the config")
    out = Path(out)
    valid = validation_problems(cfg, validation, pool, corpus, benchmarks)  # before hours of training, not after
    run = tuning_run(cfg, setting, lr, seed, root=out.parent)
    rp, m = run.paths, run.spec
    steps = checkpoint_steps(cfg, m)
    trainer = Trainer(tuning_config(cfg, lr), run, threads=threads)
    assert trainer.steps == steps[-1], (trainer.steps, steps)  # the steps the setting's RL runs train
    trainer.run()
    p = prompts_per_step(m, cfg["rl"]["rollouts_per_step"])
    tables = []
    with open_verifier(cfg) as ver:
        for st in steps:
            ck = rp.final if st == steps[-1] else rp.checkpoint(st)
            extra = {"setting": setting, "family": lr_family(m), "method": rp.method, "lr": float(lr),
                     "seed": int(seed), "steps": int(st), "prompts_per_step": p,
                     "rollouts_per_step": p * m.group_size}
            tables.append(evaluate_checkpoint(cfg, str(ck), rp.dir / "eval" / f"step{st:05d}.parquet",
                                              f"{setting} lr {lr_label(lr)} seed{seed} step {st}",
                                              threads=threads, extra_cols=extra, verifier=ver,
                                              benchmarks={VALIDATION: valid}))
    table = pd.concat(tables, ignore_index=True)
    write_table(table, out, cfg=cfg, extra={"setting": setting, "lr": float(lr)})
    return table


def validation_argmax(table: pd.DataFrame, grid: list[float] | None = None,
                      min_steps: dict[str, int] | None = None) -> pd.DataFrame:
    """The validation rule: per setting, the (lr, steps) with the highest validation accuracy
    averaged over seeds, among steps >= `min_steps[setting]` (`eligible`; default: every
    checkpoint); a tie (1e-12) goes to the smaller lr, then to fewer steps (at an equal score the
    smaller Adam step and the shorter run are the safer: they gained nothing measurable by going
    further). `table`: one row per (setting, lr, seed, steps) with `accuracy`, every setting scored
    at every (lr, steps) on the same seeds (two or more), else a ValueError naming what is missing.
    Returns TABLE_COLUMNS, one row per (setting, lr, steps): the seed mean, sd (ddof 1), min and
    max, `chosen` on each setting's argmax, `lr_at_grid_edge` where the chosen lr is the smallest
    or largest of `grid` (default: the rates in the table) and `steps_at_last_checkpoint` where the
    chosen steps are the run's last. Pure: no files."""
    need = {"setting", "family", "method", "lr", "seed", "steps", "accuracy"}
    if need - set(table):
        raise ValueError(f"validation_argmax: columns {sorted(need - set(table))} are missing")
    for name, g in table.groupby("setting", sort=True):
        seeds = g.groupby(["lr", "steps"])["seed"].apply(frozenset)
        if seeds.nunique() != 1 or len(seeds.iloc[0]) < 2:
            raise ValueError(f"validation_argmax: setting {name!r} is not scored on the same two or more "
                             f"seeds at every (lr, steps): {dict(seeds.map(sorted))}")
        if g.duplicated(["lr", "seed", "steps"]).any():
            raise ValueError(f"validation_argmax: setting {name!r} has repeated (lr, seed, steps) rows")
    agg = (table.groupby(["setting", "lr", "steps"], sort=True)
           .agg(family=("family", "first"), method=("method", "first"),
                prompts_per_step=("prompts_per_step", "first"), rollouts_per_step=("rollouts_per_step", "first"),
                seeds=("seed", "nunique"), validation_accuracy=("accuracy", "mean"),
                validation_accuracy_sd=("accuracy", lambda x: float(np.std(x, ddof=1))),
                validation_accuracy_min=("accuracy", "min"), validation_accuracy_max=("accuracy", "max"))
           .reset_index())
    agg["eligible"] = [int(st) >= int((min_steps or {}).get(name, 0)) for name, st in zip(agg["setting"], agg["steps"])]
    agg["chosen"] = agg["lr_at_grid_edge"] = agg["steps_at_last_checkpoint"] = False
    for name, g_all in agg.groupby("setting", sort=False):
        g = g_all[g_all["eligible"]]
        if g.empty:
            raise ValueError(f"validation_argmax: setting {name!r} has no checkpoint at or past step "
                             f"{(min_steps or {})[name]} (scored: {sorted(g_all['steps'].unique())})")
        best = g["validation_accuracy"].max()
        ties = g[np.isclose(g["validation_accuracy"], best, rtol=0.0, atol=1e-12)]
        i = ties.sort_values(["lr", "steps"]).index[0]
        rates = sorted(grid) if grid is not None else sorted(g["lr"].unique())
        agg.loc[i, "chosen"] = True
        agg.loc[i, "lr_at_grid_edge"] = len(rates) > 1 and bool(np.isclose(agg.loc[i, "lr"], [rates[0], rates[-1]],
                                                                          rtol=1e-9, atol=0).any())
        agg.loc[i, "steps_at_last_checkpoint"] = bool(agg.loc[i, "steps"] == g_all["steps"].max())
    return agg[list(TABLE_COLUMNS)]


def table_markdown(table: pd.DataFrame, cfg: dict, validation: str | Path) -> str:
    """lr.md: the tuning table as a markdown page, the choice marked and its edge flags spelt out;
    `validation` the split it was scored on."""
    s = settings(cfg)
    lines = [f"# Learning rates and steps chosen on the validation split (scale {cfg['scale']})", "",
             ("Rule: `sparserl.engines.lr_tuning.validation_argmax` (the (lr, steps) with the highest "
              f"validation mean@k averaged over seeds {list(s['seeds'])}; ties: the smaller lr, then fewer steps). "
              f"Grid: {[lr_label(x) for x in s['grid']]}; scored at {list(s['checkpoints'])} of each setting's "
              f"steps on {validation} (no benchmark, pool or corpus problem)."), "",
             "| setting | method | lr | steps | seeds | mean | sd | min | max | choice |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        flags = [f for f, on in (("at grid edge", r.lr_at_grid_edge), ("at last checkpoint",
                                                                         r.steps_at_last_checkpoint)) if on]
        mark = ("**chosen**" + (f" ({', '.join(flags)})" if flags else "")) if r.chosen else ""
        lines.append(f"| {r.setting} | {r.method} | {lr_label(r.lr)} | {r.steps} | {r.seeds} | "
                     f"{r.validation_accuracy:.3f} | {r.validation_accuracy_sd:.3f} | "
                     f"{r.validation_accuracy_min:.3f} | {r.validation_accuracy_max:.3f} | {mark} |")
    return "\n".join(lines) + "\n"


def select(cfg: dict, tables: list, validation: str | Path, out_table: str | Path, out_csv: str | Path,
           out_md: str | Path, out_json: str | Path) -> dict:
    """Every tuning run's validation scores (`tables`, each run's validation.parquet, scored on the
    split `validation`) -> the rule (`validation_argmax`) -> the table (`out_table`, `out_csv`,
    `out_md`) and the choice per setting (`out_json`, tuning/lr.json, read by the trainer)."""
    from sparserl.core.artifacts import (
        atomic_write_text,
        read_table,
        write_json,
        write_table,
    )
    s = check(cfg)
    if s is None:
        raise ConfigError("lr-tune-select: rl.lr_tuning.enabled is not true in the config")
    members = setting_methods(cfg)
    scores = pd.concat([read_table(t) for t in tables], ignore_index=True)
    floor = {st: min_steps(cfg, ms) for st, ms in members.items()}
    table = validation_argmax(scores, [float(x) for x in s["grid"]], floor)
    meta = {"rule": "sparserl.engines.lr_tuning.validation_argmax", "grid": [float(x) for x in s["grid"]],
            "seeds": list(s["seeds"]), "checkpoints": [float(f) for f in s["checkpoints"]],
            "metric": str(scores["metric"].iloc[0]) if "metric" in scores else "accuracy",
            "validation": str(validation)}
    write_table(table, out_table, cfg=cfg, extra=meta)
    atomic_write_text(out_csv, table.to_csv(index=False))
    atomic_write_text(out_md, table_markdown(table, cfg, validation))
    chosen = table[table["chosen"]].set_index("setting")
    out = {**meta,
           "settings": {st: {"method": r["method"], "lr": float(r["lr"]), "steps": int(r["steps"]),
                             "min_steps": int(floor[st]),
                             "validation_accuracy": float(r["validation_accuracy"]),
                             "validation_accuracy_sd": float(r["validation_accuracy_sd"]),
                             "lr_at_grid_edge": bool(r["lr_at_grid_edge"]), "methods": members[st]}
                        for st, r in chosen.iterrows()},
           "methods": {m: st for st, ms in members.items() for m in ms}}
    write_json(out, out_json, cfg=cfg)
    for st, r in chosen.iterrows():
        edge = " AT GRID EDGE" if r["lr_at_grid_edge"] else ""
        log.info(f"{st}: lr {r['lr']:.3g}, {int(r['steps'])} steps ({r['method']}, validation "
                 f"{r['validation_accuracy']:.3f} +- {r['validation_accuracy_sd']:.3f}){edge}")
    return out
