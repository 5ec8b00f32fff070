"""Load, merge and validate configs against `config.schema.yaml` (also at `configs/schema.yaml`).

Errors name the file that set the offending key, the key's dotted path and the fix, so a typo in
`configs/tiny.yaml` stops the DAG before any job starts.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from sparserl.core.paths import snapshot_tag

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
DEFAULTS = {"results_dir": "results", "figures_dir": "paper_figures", "threads": 2}


class ConfigError(ValueError):
    """A config that does not match the schema; the message names file, key and fix."""


def load_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _read(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def _origin(path_keys: list, layers: list[tuple[str, dict]]) -> str:
    """The last file in `layers` that sets the key path (or its nearest parent)."""
    for depth in range(len(path_keys), -1, -1):
        for name, data in reversed(layers):
            node: Any = data
            ok = True
            for k in path_keys[:depth]:
                if isinstance(node, dict) and k in node:
                    node = node[k]
                elif isinstance(node, list) and isinstance(k, int) and k < len(node):
                    node = node[k]
                else:
                    ok = False
                    break
            if ok:
                return name
    return layers[-1][0] if layers else "<config>"


def _format_error(err: jsonschema.ValidationError, layers: list[tuple[str, dict]]) -> str:
    keys = list(err.absolute_path)
    dotted = ".".join(str(k) for k in keys) or "<top level>"
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        allowed = sorted(err.schema.get("properties", {}))
        where = _origin(keys + extra[:1], layers)
        key = ".".join(str(k) for k in keys + extra[:1])
        hint = f"allowed keys here: {', '.join(allowed)}" if allowed else "remove it"
        return f"{where}: unknown key '{key}'; {hint}"
    if err.validator == "required":
        return f"{_origin(keys, layers)}: {dotted}: {err.message}; add it to the config"
    return (f"{_origin(keys, layers)}: key '{dotted}': {err.message}; "
            f"fix the value of '{dotted}' in that file")


def validate(cfg: dict, layers: list[tuple[str, dict]] | None = None) -> dict:
    layers = layers or [("<config>", cfg)]
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), str(e.path)))
    if errors:
        # oneOf errors are vague; report the most specific one
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(_format_error(best, layers))
    _check_semantics(cfg, layers)
    return cfg


def _check_semantics(cfg: dict, layers) -> None:
    """Cross-key checks JSON Schema cannot express."""
    for name, pol in cfg["policies"].items():
        need = (["hf_name"] if pol["source"] == "hub" else
                ["hidden_size", "num_layers", "num_heads", "num_kv_heads", "ffn_size", "lr", "steps"])
        for k in need:
            if k not in pol:
                raise ConfigError(f"{_origin(['policies', name], layers)}: policies.{name}: "
                                  f"source '{pol['source']}' needs '{k}'; add it")
        if pol["source"] == "pretrain" and pol["hidden_size"] % pol["num_heads"]:
            raise ConfigError(f"{_origin(['policies', name], layers)}: policies.{name}.hidden_size "
                              f"must be divisible by num_heads")
    for name in cfg["evaluation"].get("policies", []):
        if name not in cfg["policies"] and "@" not in name:
            raise ConfigError(f"{_origin(['evaluation', 'policies'], layers)}: evaluation.policies "
                              f"names '{name}', which is not under 'policies'")
    for key in ("study_reference", "study_oracle"):
        ref = cfg.get("basis", {}).get(key)
        if ref:
            name, _, snap = ref.partition("@")
            snaps = [snapshot_tag(f) for f in cfg.get("pretrain", {}).get("snapshots", [])]
            if name not in cfg["policies"] or (snap and snap not in snaps):
                raise ConfigError(f"{_origin(['basis', key], layers)}: basis.{key} = '{ref}' names "
                                  f"no policy or snapshot; policies: {sorted(cfg['policies'])}, "
                                  f"snapshots: {snaps}")
    if cfg["tasks"]["source"] == "procedural":
        for k in ("train_pool", "benchmarks"):
            if k not in cfg["tasks"]:
                raise ConfigError(f"{_origin(['tasks'], layers)}: tasks.{k} is required when "
                                  "tasks.source is 'procedural'")


def rollout_max_new_tokens(cfg: dict) -> int:
    """Response length cap of pass rates, reference caches and evaluation (`rollout.max_new_tokens`)."""
    return int(cfg["rollout"]["max_new_tokens"])


def rl_max_new_tokens(cfg: dict) -> int:
    """Response length cap of RL rollouts: `rl.max_new_tokens`, else `rollout.max_new_tokens`."""
    return int((cfg.get("rl") or {}).get("max_new_tokens") or rollout_max_new_tokens(cfg))


def load_config(paths: str | Path | Iterable[str | Path], overrides: dict | None = None) -> dict:
    """Merge config files in order (later wins), apply defaults, validate."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    layers = [(str(p), _read(Path(p))) for p in paths]
    if overrides:
        layers.append(("<command-line --config>", overrides))
    cfg: dict = copy.deepcopy(DEFAULTS)
    for _, data in layers:
        cfg = deep_merge(cfg, data)
    return validate(cfg, layers)


def write_resolved(cfg: dict, folder: str | Path) -> Path:
    """Write the validated, merged config as `<folder>/<hash>.json` (once per distinct config) and
    return its path: the one file every job of a Snakemake run reads, so `--config key=value`
    overrides change what the jobs compute, not only the DAG."""
    from sparserl.core.artifacts import atomic_write_text, config_hash
    path = Path(folder) / f"{config_hash(cfg)}.json"
    text = json.dumps(cfg, indent=1)  # key order kept: jobs iterate over e.g. `policies` in file order
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)
    return path


def from_snakemake(config: dict, configfiles: Iterable[str | Path]) -> dict:
    """Validate the config Snakemake assembled, naming the configfile a bad key came from."""
    layers = [(str(p), _read(Path(p))) for p in configfiles]
    cfg = deep_merge(DEFAULTS, dict(config))
    return validate(cfg, layers or [("<snakemake config>", cfg)])
