"""The learning rate and steps a run trains with when `rl.lr_tuning` chose them: the batch setting
of a method (`setting_of`: lr family, prompts and rollouts a step, steps), and that setting's
entry of tuning/lr.json (or of `rl.lr_tuning.from`). Below the engines, so that a run resolved
once (`methods.run.resolve_run`) reads the choice without importing the tuning's trainer; the
tuning itself (its runs, the rule `validation_argmax`, the table) is `engines.lr_tuning`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparserl.core.config import ConfigError, setting
from sparserl.core.logs import get_logger

log = get_logger(__name__)

FAMILIES = ("grpo", "rloo", "dapo", "gspo", "gpg", "reinforce", "basis", "v05", "critic")
REINFORCE_ESTIMATORS = ("vanilla", "reinforce_pp", "negative_only")  # one rollout, no group baseline


def lr_family(m) -> str:
    """The family of method spec `m` (one of FAMILIES): the first part of its batch setting."""
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


def setting_of(m, rl: dict) -> str:
    """The batch setting of method spec `m` under the scale's `rl` settings, as a label: family,
    prompts per step, rollouts per step (prompts x group size: OSLA's k_init, DAPO's pre-filter
    draw) and the steps its runs train, e.g. grpo_p32_r256_s100 for GRPO G=8 at 256 rollouts."""
    from sparserl.methods.spec import prompts_per_step, total_steps
    p = prompts_per_step(m, rl["rollouts_per_step"])
    return f"{lr_family(m)}_p{p}_r{p * m.group_size}_s{total_steps(rl, m)}"


def settings(cfg: dict) -> dict | None:
    """`rl.lr_tuning` when it is enabled (the schema requires its keys then), else None."""
    s = (cfg.get("rl") or {}).get("lr_tuning") or {}
    return s if s.get("enabled") else None


def borrowed(cfg: dict) -> Path | None:
    """`rl.lr_tuning.from` ({scale} filled in) when this tree reads another tree's chosen rates
    instead of tuning (enabled and set), else None."""
    s = settings(cfg)
    return Path(str(s["from"]).replace("{scale}", cfg["scale"])) if s and s.get("from") else None


def chosen_path(P) -> Path:
    """The chosen rates the runs of tree `P` (a `Paths`) read: `rl.lr_tuning.from`, else its
    tuning/lr.json."""
    return borrowed(P.cfg) or P.tuning("lr.json")


def tuned_choice(cfg: dict, method, path: Path) -> dict | None:
    """The rule's choice for `method`'s setting ({lr, steps, ...} of `path`, the chosen rates:
    `chosen_path`), None when rl.lr_tuning is off or the setting was not tuned (a method
    outside rl.methods; a warning)."""
    s = settings(cfg)
    if s is None:
        return None
    path = Path(path)
    if not path.is_file():
        if borrowed(cfg):
            raise ConfigError(f"{path}: rl.lr_tuning.from names the first tree's chosen rates, which are missing; "
                              f"build them there first (`snakemake --cores 2 {path} --configfile "
                              f"configs/{cfg['scale']}.yaml`)")
        raise ConfigError(f"{path}: rl.lr_tuning is enabled but the tuned learning rates are missing; "
                          f"build them first (`snakemake --cores 2 {path}`, rule lr_tuning) or set "
                          "rl.lr_tuning.enabled: false")
    data = json.loads(path.read_text())
    grid = [float(x) for x in s["grid"]]
    if "settings" not in data or not np.allclose(sorted(data.get("grid", [])), sorted(grid), rtol=1e-12, atol=0) \
            or len(data["grid"]) != len(grid):
        raise ConfigError(f"{path}: chosen on another grid ({data.get('grid')}) than rl.lr_tuning.grid "
                          f"{grid}; rerun the tuning (rule lr_tuning)")
    st = setting_of(method, cfg["rl"])
    entry = data["settings"].get(st)
    if entry is None:
        log.warning(f"method {method.name!r}: its setting {st!r} has no tuned lr in {path} (not in "
                    f"rl.methods); it trains with rl.lr = {base_lr(cfg)}")
    return entry


def base_lr(cfg: dict) -> float:
    """rl.lr: the rate of every run when rl.lr_tuning is off, and of runs outside the tuning."""
    return float(setting(cfg, "rl", "lr"))


def tuned_run(cfg: dict, method, chosen: Path) -> tuple[float, str, int]:
    """(lr, source, steps) a run of `method` trains with: its setting's rate and steps chosen by
    `validation_argmax` (read from `chosen`, `chosen_path`) and "tuned" when rl.lr_tuning is
    enabled, else rl.lr, "fixed" and the
    horizon `total_steps` (also for a setting left untuned)."""
    from sparserl.methods.spec import total_steps
    n = total_steps(cfg["rl"], method)
    entry = tuned_choice(cfg, method, chosen)
    if entry is None:
        return base_lr(cfg), "fixed", n
    if not 1 <= int(entry["steps"]) <= n:
        raise ConfigError(f"{chosen}: {entry['steps']} steps chosen for "
                          f"{setting_of(method, cfg['rl'])}, past its {n}; rerun the tuning (rule lr_tuning)")
    return float(entry["lr"]), "tuned", int(entry["steps"])


def tuned_lr(cfg: dict, method, chosen: Path) -> tuple[float, str]:
    """(lr, source) of `tuned_run`."""
    return tuned_run(cfg, method, chosen)[:2]


def tuned_steps(cfg: dict, method, chosen: Path) -> int:
    """The steps of `tuned_run`."""
    return tuned_run(cfg, method, chosen)[2]
