"""RL method specs (`configs/methods/<name>.yaml`): one file per method, scale-free.

A method names an estimator from `sparserl.estimators`, its rollouts per prompt, its policy loss
and optional pieces (DAPO's dynamic sampling and overlong shaping, V0.5's prior and OSLA, BASIS's
refinement). The scale config says how many rollouts a step consumes; prompts per step are
`rollouts_per_step / group_size`, so every method sees the same rollout budget per step (the
BASIS table's 512 = 64 x 8 = 512 x 1; V0.5's batch x k_init = GRPO-16's batch x 16).
"""
from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml

from sparserl.core.config import ConfigError

METHODS_DIR = Path(__file__).resolve().parents[3] / "configs" / "methods"

_loss = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "properties": {
        "type": {"enum": ["ppo_clip", "gspo", "gpg"]},
        "clip_low": {"type": "number", "minimum": 0},
        "clip_high": {"type": "number", "minimum": 0},
        "agg": {"enum": ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]},
    },
}
METHOD_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["estimator", "group_size", "loss"],
    "properties": {
        "estimator": {"type": "string"},
        "group_size": {"type": "integer", "minimum": 1},
        "loss": _loss,
        "kl_coef": {"type": "number", "minimum": 0},
        "steps_factor": {"type": "number", "exclusiveMinimum": 0},
        "dynamic_sampling": {"type": "object", "additionalProperties": False, "properties": {
            "enabled": {"type": "boolean"}, "gen_batch_factor": {"type": "number", "minimum": 1}}},
        "overlong": {"type": "object", "additionalProperties": False, "properties": {
            "enabled": {"type": "boolean"},
            "buffer_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "penalty": {"type": "number", "minimum": 0}}},
        "osla": {"type": "object", "additionalProperties": False,
                 "required": ["k_init", "k_step", "c"], "properties": {
                     "k_init": {"type": "integer", "minimum": 1},
                     "k_step": {"type": "integer", "minimum": 1},
                     "c": {"type": "number", "exclusiveMinimum": 0},
                     "k_max": {"type": "integer", "minimum": 1},
                     "global_stop": {"type": "number", "minimum": 0, "maximum": 1},
                     "pad_multiple": {"type": "integer", "minimum": 1}}},
        "prior": {"type": "object", "required": ["kind"], "properties": {
            "kind": {"enum": ["oracle", "constant", "v0"]}, "p": {"type": "number"},
            "offset": {"type": "number"}, "pseudo_count": {"type": "number", "minimum": 0}}},
        "support_buffer": {"type": "object", "additionalProperties": False, "properties": {
            "size": {"type": "integer", "minimum": 1},
            "context": {"type": "integer", "minimum": 1}}},
        "basis": {"type": "object", "additionalProperties": False, "properties": {
            "kind": {"enum": ["unb", "vop", "rvg"]},
            "calibrate_on": {"enum": ["current", "previous"]},
            "inactive": {"enum": ["zero", "vhat", "formula"]},
            "beta": {"type": ["number", "string"]}}},
    },
}

DEFAULTS = {"kl_coef": 0.0, "steps_factor": 1.0}


def method_names(methods_dir: Path = METHODS_DIR) -> list[str]:
    return sorted(p.stem for p in Path(methods_dir).glob("*.yaml"))


def load_method(name: str, methods_dir: Path = METHODS_DIR) -> dict:
    path = Path(methods_dir) / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"{path}: no such method; known: {', '.join(method_names(methods_dir))}")
    spec = yaml.safe_load(path.read_text()) or {}
    errs = sorted(jsonschema.Draft202012Validator(METHOD_SCHEMA).iter_errors(spec),
                  key=lambda e: len(e.absolute_path))
    if errs:
        e = errs[0]
        key = ".".join(map(str, e.absolute_path)) or "<top level>"
        raise ConfigError(f"{path}: key '{key}': {e.message}; fix it in that file")
    from sparserl.estimators import list_estimators
    if spec["estimator"] not in list_estimators():
        raise ConfigError(f"{path}: key 'estimator': unknown estimator {spec['estimator']!r}; "
                          f"known: {', '.join(list_estimators())}")
    if spec["estimator"].startswith("v05") and "prior" not in spec:
        raise ConfigError(f"{path}: V0.5 estimators need a 'prior' (kind: oracle | constant | v0)")
    out = {**DEFAULTS, **spec, "name": name}
    if "osla" in out:
        o = out["osla"]
        o.setdefault("k_max", int(1 / o["c"] ** 0.5))
        o.setdefault("global_stop", 0.25)
        if o["k_init"] != out["group_size"]:
            raise ConfigError(f"{path}: osla.k_init ({o['k_init']}) must equal group_size "
                              f"({out['group_size']}), which sizes the prompt batch")
    return out


def needs_reference_cache(method: dict) -> bool:
    """BASIS and the oracle prior read the starting policy's cached reference pass rates."""
    return method["estimator"].startswith("basis") or method.get("prior", {}).get("kind") == "oracle"


def estimator_options(method: dict) -> dict:
    """Keyword options a method passes to its registry estimator (the CPU trainer and the
    OpenRLHF plugin both call the estimator with these)."""
    if method["estimator"].startswith("basis"):
        return {"inactive": (method.get("basis") or {}).get("inactive", "zero")}
    return {}


def total_steps(rl: dict, method: dict) -> int:
    """RL steps of a method (BASIS's grid entries train for a fraction of them)."""
    return max(1, round(rl["steps"] * float(method.get("steps_factor", 1.0))))


def prompts_per_step(method: dict, rollouts_per_step: int) -> int:
    return max(1, rollouts_per_step // method["group_size"])
