"""Load, merge and validate configs against `config.schema.yaml` (also at `configs/schema.yaml`).

Errors name the file that set the offending key, the key's dotted path and the fix, so a typo in
`configs/tiny.yaml` stops the DAG before any job starts.
"""
from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import jsonschema
import yaml


def snapshot_tag(fraction: float) -> str:
    """The tag of a pre-training snapshot at `fraction` of the steps (0.5 -> "p50"), as policy
    references (`m@p50`) and their folders name it."""
    return f"p{round(fraction * 100):02d}"


SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
# Top-level settings whose schema defaults load_config writes into the cfg: every resolved config
# has carried them since before the schema held defaults, so its hash (artifact keys, the resolved
# config's file name) includes them. Every other default is read through `setting`, never merged in.
FILLED_KEYS = ("results_dir", "figures_dir", "threads")


class ConfigError(ValueError):
    """A config that does not match the schema; the message names file, key and fix."""


def load_schema() -> dict:
    return copy.deepcopy(_schema())


@functools.lru_cache(maxsize=1)
def _schema() -> dict:
    # once a process; libyaml's parser where PyYAML has it (pure Python takes ~0.5 s)
    return yaml.load(SCHEMA_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def filled_defaults() -> dict:
    """The schema defaults of FILLED_KEYS, the base layer of every merge."""
    return {k: schema_default(k) for k in FILLED_KEYS}


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping sets one key twice."""


class _UniqueKeys:
    """Rejects a key given twice in one mapping: plain YAML keeps the last value silently, so
    `seed: 0` ... `seed: 1` would run seed 1 with nothing said."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` merges defaults; overriding one of them is the point
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # unhashable key: SafeLoader reports it
                if first is not key_node.start_mark:
                    raise DuplicateKeyError(None, None, f"duplicate key {key!r} (first set on line "
                                            f"{first.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


class UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """SafeLoader with unique keys: its errors carry the messages and marks this module reports."""


# libyaml's parser when PyYAML has it: about 10x faster, and a job reads its configs, every method
# file and the schema at start; the pure-Python loader reads a file that fails, for its message
_FAST_LOADER = type("FastUniqueKeyLoader", (_UniqueKeys, yaml.CSafeLoader), {}) \
    if getattr(yaml, "__with_libyaml__", False) else None


def read_yaml(path: str | Path, raw: bytes | None = None) -> Any:
    """Parse a YAML file (or `raw`, its bytes already read); ConfigError "<file>, line L, column C:
    <problem>" on a syntax error, a duplicate key or a byte that is not UTF-8 (yaml.safe_load of a
    string names no file)."""
    path = Path(path)
    raw = path.read_bytes() if raw is None else raw
    try:
        text = raw.decode("utf-8")  # whole file: the error offset is then the file's byte offset
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: byte {raw[e.start]:#04x} is not UTF-8 (byte offset "
                          f"{e.start}); save the file as UTF-8") from None
    if _FAST_LOADER is not None:
        fast = _FAST_LOADER(text)
        try:
            return fast.get_single_data()
        except yaml.YAMLError:
            pass  # read again below: the same error, worded and marked as always
        finally:
            fast.dispose()
    loader = UniqueKeyLoader(text)
    loader.name = str(path)  # marks name the file, not "<unicode string>"
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        what = e.problem or str(e)
        if e.context and e.context_mark is not None:
            what += f" ({e.context} on line {e.context_mark.line + 1})"
        fix = "keep one of the two" if isinstance(e, DuplicateKeyError) else "fix the YAML there"
        raise ConfigError(f"{where}: not valid YAML: {what}; {fix}") from None
    finally:
        loader.dispose()


def _unique_pairs(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if dup is not None:
        raise ValueError(f"duplicate key {dup!r} in one object; keep one of the two")
    return dict(pairs)


def _read(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_pairs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}, line {e.lineno}, column {e.colno}: not valid JSON: {e.msg}; "
                              "fix that line") from None
        except ValueError as e:  # a duplicate key (_unique_pairs), or bytes that are not UTF-8
            raise ConfigError(f"{path}: not valid JSON: {e}") from None
    else:
        data = read_yaml(path)
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
    where = _origin(keys, layers)
    return f"{where}: key '{dotted}': {err.message}; fix the value of '{dotted}' {_there(where)}"


def _there(where: str) -> str:
    """Where the user fixes a value: the command line for a `--config` layer, else the file."""
    return "on the command line" if where.startswith(COMMAND_LINE) else "in that file"


def nonfinite_numbers(data: Any, keys: tuple = ()) -> Iterator[tuple[tuple, float]]:
    """(key path, value) of every NaN or +-inf float in nested mappings and lists. JSON Schema's
    `minimum` lets NaN through (every comparison with NaN is false), and YAML reads `.nan`,
    `.inf`, `-.inf` (JSON `NaN`, `Infinity`) as floats."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from nonfinite_numbers(v, keys + (k,))
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            yield from nonfinite_numbers(v, keys + (i,))
    elif isinstance(data, float) and not math.isfinite(data):
        yield keys, data


def nonfinite_message(where: str, keys: tuple, value: float) -> str:
    dotted = ".".join(map(str, keys)) or "<top level>"
    return (f"{where}: key '{dotted}' is {value!r}; every number must be finite (YAML .nan, .inf and "
            f"-.inf are refused); set '{dotted}' to a finite number {_there(where)}")


def check_finite(cfg: dict, layers: list[tuple[str, dict]]) -> None:
    """ConfigError naming the file and key of the first NaN or infinite number."""
    for keys, value in nonfinite_numbers(cfg):
        raise ConfigError(nonfinite_message(_origin(list(keys), layers), keys, value))


def validate(cfg: dict, layers: list[tuple[str, dict]] | None = None) -> dict:
    layers = layers or [("<config>", cfg)]
    check_finite(cfg, layers)
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
    rl = cfg.get("rl")
    if rl:
        name, _, snap = rl["policy"].partition("@")
        snaps = [snapshot_tag(f) for f in cfg.get("pretrain", {}).get("snapshots", [])]
        if name not in cfg["policies"] or (snap and snap not in snaps):
            raise ConfigError(f"{_origin(['rl', 'policy'], layers)}: key 'rl.policy' = '{rl['policy']}' names "
                              f"no policy{' snapshot' if snap else ''}; set it to one of the keys under "
                              f"'policies' ({', '.join(cfg['policies'])})"
                              + (f" with a snapshot of pretrain.snapshots ({', '.join(snaps)})" if snap else ""))
    for name in cfg["evaluation"].get("policies", []):
        if name not in cfg["policies"] and "@" not in name:
            raise ConfigError(f"{_origin(['evaluation', 'policies'], layers)}: evaluation.policies "
                              f"names '{name}', which is not under 'policies'")
    harvest = (cfg.get("v0") or {}).get("harvest") or {}
    unknown = [p for p in harvest.get("policies") or [] if p not in cfg["policies"]]
    if unknown:  # at load time, not when a workflow file is parsed (an overlay on the wrong scale)
        raise ConfigError(f"{_origin(['v0', 'harvest', 'policies'], layers)}: v0.harvest.policies names "
                          f"{unknown}, not under 'policies' ({', '.join(cfg['policies'])}); list only those, "
                          "or layer the overlay on the scale it was written for")
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
    crit = cfg.get("critique")
    if crit:  # method files are checked where the DAG parses (critique.smk), a layer above
        for name, e in crit.get("experiments", {}).items():
            where = _origin(["critique", "experiments", name], layers)
            if e["env"] not in crit["envs"]:
                raise ConfigError(f"{where}: critique.experiments.{name}.env '{e['env']}' is not under "
                                  f"critique.envs ({', '.join(crit['envs'])}); add it or fix the name")
    _check_cluster(cfg, layers)
    for check in SEMANTIC_CHECKS:
        check(cfg, lambda path: _origin(path, layers))


# OpenRLHF's cluster shape: rl.openrlhf's keys whose schema defaults `openrlhf_shape` fills in
OPENRLHF_SHAPE_KEYS = ("nodes", "gpus_per_node", "vllm.tensor_parallel_size", "train.micro_batch_size")


def openrlhf_shape(over: dict | None) -> dict:
    """An rl.openrlhf mapping over the schema defaults of OpenRLHF's cluster shape
    (`OPENRLHF_SHAPE_KEYS`); the config itself is left as it is."""
    return {**{k: schema_default("rl", "openrlhf", k) for k in OPENRLHF_SHAPE_KEYS}, **(over or {})}


def _check_cluster(cfg: dict, layers) -> None:
    """Settings that must agree for an OpenRLHF job on its SLURM allocation (resources.rl): Ray's
    placement group waits forever for GPUs or nodes the allocation lacks, DeepSpeed refuses a
    train batch its micro-batches x GPUs do not divide."""
    res = (cfg.get("resources") or {}).get("rl") or {}
    if not res.get("gpus"):
        return
    sections = [("rl", cfg.get("rl"))] if cfg.get("rl") else []
    crit = cfg.get("critique") or {}
    if crit.get("rl"):
        sections.append(("critique.rl", crit["rl"]))
        sections += [(f"critique.experiments.{n}.rl", {**crit["rl"], **(e.get("rl") or {})})
                     for n, e in (crit.get("experiments") or {}).items()]
    for key, rl in sections:
        over = openrlhf_shape(rl.get("openrlhf"))
        where = _origin([*key.split("."), "openrlhf"], layers)
        nodes, gpn, tp = int(over["nodes"]), int(over["gpus_per_node"]), int(over["vllm.tensor_parallel_size"])
        res_nodes = int(section_setting(res, "$defs", "resources", "nodes"))
        if res_nodes != nodes:
            raise ConfigError(f"{where}: resources.rl.nodes = {res_nodes} but {key}.openrlhf.nodes = "
                              f"{nodes}: Ray would wait for nodes SLURM never gives; set both to the same count")
        if int(res["gpus"]) != nodes * gpn:
            raise ConfigError(f"{where}: resources.rl.gpus = {res['gpus']} (the job's total) but {key}.openrlhf "
                              f"nodes x gpus_per_node = {nodes} x {gpn}; set resources.rl.gpus to {nodes * gpn} "
                              "or gpus_per_node to match")
        engines = int(over.get("vllm.num_engines", nodes * gpn // tp))
        if engines * tp != nodes * gpn:
            raise ConfigError(f"{where}: {key}.openrlhf vllm.num_engines x vllm.tensor_parallel_size = {engines} x "
                              f"{tp} but the colocated job has {nodes * gpn} GPUs; set vllm.num_engines to "
                              f"{nodes * gpn // tp}")
        rollouts = rl.get("rollouts_per_step")
        mini = int(section_setting(rl, "$defs", "trainer", "mini_batches"))
        micro = int(over["train.micro_batch_size"])
        if rollouts and (int(rollouts) // mini) % (micro * nodes * gpn):
            raise ConfigError(f"{where}: {key}.rollouts_per_step / mini_batches = {rollouts} / {mini} is not a "
                              f"multiple of train.micro_batch_size x GPUs = {micro} x {nodes * gpn} (DeepSpeed "
                              f"refuses it); change {key}.mini_batches or {key}.openrlhf train.micro_batch_size")


@functools.lru_cache(maxsize=1)
def _v0_actor_defaults() -> tuple:
    props = load_schema()["$defs"]["openrlhf"]["properties"]  # read once: parsing the schema takes ~0.1 s
    return tuple((k, spec["default"]) for k, spec in props.items() if k.startswith("v0_"))


def v0_actor_settings(over: dict) -> dict:
    """The V0 prior actor's launcher keys of an rl.openrlhf mapping, defaults from the schema."""
    return {k: (over or {}).get(k, d) for k, d in _v0_actor_defaults()}


# Checks that need a layer above core (the OpenRLHF placement plan): registered where they are
# defined (engines.openrlhf.placement), run by `_check_semantics` with (cfg, origin) where
# origin(path) names the file a key came from. The CLI and the Snakefile import their modules.
SEMANTIC_CHECKS: list = []


def _schema_node(keys: tuple) -> dict | None:
    """The schema of a key path; a path starting "$defs", NAME starts at that definition (the
    method files' schema is `$defs/method`)."""
    root = _schema()
    if keys[:1] == ("$defs",):
        return _schema_at(root, keys[2:], start=root["$defs"].get(keys[1]) if len(keys) > 1 else None)
    return _schema_at(root, keys)


@functools.lru_cache(maxsize=None)
def _default(keys: tuple):
    node = _schema_node(keys)
    if node is None or "default" not in node:
        raise KeyError(f"{SCHEMA_PATH}: no default for {'.'.join(map(str, keys))}; give it a `default:` "
                       "and a `description:` there")
    return node["default"]


def schema_default(*keys: str):
    """The schema's `default` of the setting at a key path (e.g. "evaluation", "start_k"): where a
    setting's default lives, so code and documentation read the same number. KeyError naming
    the path where the schema has none."""
    return copy.deepcopy(_default(tuple(keys)))


@functools.lru_cache(maxsize=None)
def _defaults(keys: tuple) -> dict:
    node = _schema_node(keys)
    if node is None:
        raise KeyError(f"{SCHEMA_PATH}: no setting {'.'.join(map(str, keys))}")
    out = {}
    for k, sub in node.get("properties", {}).items():
        sub = _resolve_ref(sub, _schema())
        if "default" in sub:
            out[k] = sub["default"]
        elif sub.get("type") == "object" and sub.get("properties"):
            nested = _defaults(tuple(keys) + (k,))
            if nested:
                out[k] = nested
    return out


def schema_defaults(*keys: str) -> dict:
    """Every default under the mapping at a key path, nested as the config nests it (a
    sub-mapping appears where it holds a default); keys without a default are left out."""
    return copy.deepcopy(_defaults(tuple(keys)))


def with_defaults(section: dict | None, *keys: str) -> dict:
    """A config section (e.g. cfg["v0"]["harvest"]) over its schema defaults: a settings dict
    for code that reads a whole section. Never written back into the cfg (hashes)."""
    return deep_merge(schema_defaults(*keys), section or {})


def schema_default_by(case: str, *keys: str):
    """A default that depends on another setting, from the schema's `default_by_<name>` mapping
    at a key path (rollout.batch_size by backend, a method's loss clip by loss type); KeyError
    naming the path and the case the mapping lacks."""
    node = _schema_node(tuple(keys)) or {}
    table = next((v for k, v in node.items() if k.startswith("default_by_")), None)
    if not isinstance(table, dict) or case not in table:
        raise KeyError(f"{SCHEMA_PATH}: no default for {'.'.join(keys)} when it depends on {case!r}")
    return copy.deepcopy(table[case])


def section_setting(section: Mapping | None, *keys: str):
    """`section[keys[-1]]`, else the schema default at `keys`: for a mapping that is part of the
    config but not at its root (a sampling protocol, an env's spec, a trainer's rl settings)."""
    if isinstance(section, Mapping) and keys[-1] in section:
        return section[keys[-1]]
    return schema_default(*keys)


def default_leaves(cfg: dict) -> Iterator[tuple[tuple, Any]]:
    """(key path, default) of every schema default that applies to cfg: the properties with a
    `default` under the root, through $ref and allOf / oneOf / anyOf, and under the names cfg
    gives a mapping of additionalProperties (policies.<name>, critique.envs.<name>)."""
    root = _schema()

    def walk(node: Any, keys: tuple, here: Any) -> Iterator[tuple[tuple, Any]]:
        node = _resolve_ref(node, root)
        if not isinstance(node, dict):
            return
        if "default" in node:
            yield keys, node["default"]
            return
        branches = [node] + [_resolve_ref(b, root) for b in
                             node.get("allOf", []) + node.get("oneOf", []) + node.get("anyOf", [])]
        props: dict = {}
        for b in branches:
            props.update(b.get("properties", {}) if isinstance(b, dict) else {})
        for k, sub in props.items():
            yield from walk(sub, keys + (k,), here.get(k) if isinstance(here, dict) else None)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and isinstance(here, dict):
            for k in here:
                if k not in props:
                    yield from walk(extra, keys + (k,), here[k])

    yield from walk(root, (), cfg)


_UNSET = object()


def setting(cfg: dict | None, *keys: str):
    """The cfg's value at a key path (e.g. setting(cfg, "basis", "reference_n")), else the
    schema's default there; KeyError naming the path where the cfg lacks it and the schema has
    no default. A value the cfg sets, null included, wins."""
    node: Any = cfg
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            node = _UNSET
            break
        node = node[k]
    return schema_default(*keys) if node is _UNSET else node


def start_samples(cfg: dict) -> int:
    """Samples a problem of the RL start policy's benchmark evaluation (`evaluation.start_k`)."""
    return int(setting(cfg, "evaluation", "start_k"))


def start_seed(cfg: dict) -> int:
    """The start policies' pre-training seed (`pretrain.start_seed`): the `start` every per-problem
    evaluation records and the head-to-head's bootstrap resamples."""
    return int(setting(cfg, "pretrain", "start_seed"))


def rollout_max_new_tokens(cfg: dict) -> int:
    """Response length cap of pass rates, reference caches and evaluation (`rollout.max_new_tokens`)."""
    return int(cfg["rollout"]["max_new_tokens"])


def rl_max_new_tokens(cfg: dict) -> int:
    """Response length cap of RL rollouts: `rl.max_new_tokens`, else `rollout.max_new_tokens`."""
    return int((cfg.get("rl") or {}).get("max_new_tokens") or rollout_max_new_tokens(cfg))


DEFAULT_LAYER = "default"  # the name of the schema defaults' layer (`load_layers`, `config show`)


def load_layers(paths: str | Path | Iterable[str | Path], overrides: dict | None = None,
                command_line: bool = False) -> list[tuple[str, dict]]:
    """The layers load_config merges, in order: (DEFAULT_LAYER, the FILLED_KEYS defaults), each
    file (named by its path), then the overrides: one layer named "<command-line --config>", or
    with `command_line` one layer per entry, typed by the schema (`override_layers`)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    layers = [(DEFAULT_LAYER, filled_defaults())] + [(str(p), _read(Path(p))) for p in paths]
    if command_line:
        layers += override_layers(overrides)
    elif overrides:
        layers.append(("<command-line --config>", overrides))
    return layers


def merge_layers(layers: list[tuple[str, dict]]) -> dict:
    """Merge layers in order (later wins) and validate, blaming the layer that set a bad key."""
    cfg: dict = {}
    for _, data in layers:
        cfg = deep_merge(cfg, data)
    return validate(cfg, layers)


def load_config(paths: str | Path | Iterable[str | Path], overrides: dict | None = None) -> dict:
    """Merge config files in order (later wins) over the FILLED_KEYS defaults, validate."""
    return merge_layers(load_layers(paths, overrides))


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


COMMAND_LINE = "--config"  # the name of a command-line layer starts with it (`_there`)


def _resolve_ref(node: Any, root: dict) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _schema_at(root: dict, keys: tuple, start: dict | None = None) -> dict | None:
    """The schema of the value at a key path (through $ref, properties, additionalProperties,
    items and the branches of oneOf / anyOf / allOf) from `start` (default: the root); None where
    the schema has no such key."""
    node: Any = root if start is None else start
    if node is None:
        return None
    for k in keys:
        node = _resolve_ref(node, root)
        found = None
        for branch in [node] + [_resolve_ref(b, root) for b in
                                node.get("oneOf", []) + node.get("anyOf", []) + node.get("allOf", [])]:
            if isinstance(k, int):
                found = branch.get("items")
            elif k in branch.get("properties", {}):
                found = branch["properties"][k]
            elif isinstance(branch.get("additionalProperties"), dict):
                found = branch["additionalProperties"]
            if found is not None:
                break
        if found is None:
            return None
        node = found
    return _resolve_ref(node, root)


def _typed(value: Any, keys: tuple, root: dict) -> Any:
    """A command-line value typed by the schema: Snakemake hands `--config` values over as
    strings ('rl={"steps": 20}' gives {"steps": "20"}), so a string is read as YAML ("20" -> 20,
    "true", "null", "[1, 2]") where the schema takes the parsed value, and kept where it takes the
    string; where it takes neither, the parsed value stays for `validate` to report."""
    if isinstance(value, dict):
        return {k: _typed(v, keys + (k,), root) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v, keys + (i,), root) for i, v in enumerate(value)]
    node = _schema_at(root, keys) if isinstance(value, str) else None
    if node is None:
        return value
    candidates = []
    try:
        parsed = yaml.safe_load(value)
        candidates.append(_typed(parsed, keys, root) if isinstance(parsed, (dict, list)) else parsed)
    except yaml.YAMLError:
        pass
    for number in (int, float):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            candidates.append(number(value))
        except ValueError:
            pass
    sub = jsonschema.Draft202012Validator({**node, "$defs": root.get("$defs", {})})
    typed = [c for c in candidates if not isinstance(c, str)]
    for c in typed:
        if sub.is_valid(c):
            return c
    # the schema takes the string, or nothing fits: the parsed value names the problem best
    return value if sub.is_valid(value) or not typed else typed[0]


def _nest(dotted: str, value: Any) -> dict:
    out: Any = value
    for k in reversed(dotted.split(".")):
        out = {k: out}
    return out


def override_layers(overrides: dict | None) -> list[tuple[str, dict]]:
    """One layer per `--config` entry, typed by the schema and named as typed on the command line:
    a dotted key (`rl.steps=20`, a string) is nested ({"rl": {"steps": 20}})."""
    root = load_schema()
    layers = []
    for key, value in (overrides or {}).items():
        shown = value if isinstance(value, str) else json.dumps(value)
        nested = _nest(key, value) if isinstance(key, str) and "." in key else {key: value}
        layers.append((f"{COMMAND_LINE} {key}={shown}", _typed(nested, (), root)))
    return layers


def _leaves(data: Any, keys: tuple = ()) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of nested mappings; a list is one leaf."""
    if isinstance(data, dict) and data:
        for k, v in data.items():
            yield from _leaves(v, keys + (k,))
    else:
        yield ".".join(map(str, keys)), data


def _get(data: Any, dotted: str, missing: Any = None) -> Any:
    for k in dotted.split("."):
        if not isinstance(data, dict) or k not in data:
            return missing
        data = data[k]
    return data


def describe_overrides(overrides: dict | None, configfiles: Iterable[str | Path]) -> str:
    """One line: every `--config` setting with its typed value and the value it replaces."""
    base: dict = filled_defaults()
    for p in configfiles:
        base = deep_merge(base, _read(Path(p)))
    unset = object()
    parts = []
    for _, data in override_layers(overrides):
        for dotted, value in _leaves(data):
            was = _get(base, dotted, unset)
            parts.append(f"{dotted}={json.dumps(value)}"
                         + (" (new key)" if was is unset else f" (was {json.dumps(was)})"))
    return "command-line --config: " + ", ".join(parts)


def from_snakemake(config: dict, configfiles: Iterable[str | Path], overrides: dict | None = None) -> dict:
    """Validate the config Snakemake assembled, naming the configfile a bad key came from, or the
    `--config` entry (`overrides`: Snakemake's `workflow.config_settings.config`), whose string
    values are typed by the schema and whose dotted keys (`rl.steps=20`) are nested."""
    layers = [(str(p), _read(Path(p))) for p in configfiles]
    cfg = deep_merge(filled_defaults(),
                     {k: v for k, v in dict(config).items() if not (isinstance(k, str) and "." in k)})
    cmd = override_layers(overrides)
    for _, data in cmd:  # the typed values replace the strings Snakemake merged into `config`
        cfg = deep_merge(cfg, data)
    layers += cmd
    return validate(cfg, layers or [("<snakemake config>", cfg)])


def settings_key(settings: dict, folder: str | Path) -> str:
    """`config_hash(settings)`, the settings recorded as `<folder>/<hash>.json` so that a rule's
    hash param can be explained as the keys that changed (`explain_key_change`)."""
    from sparserl.core.artifacts import atomic_write_text, config_hash
    h = config_hash(settings)
    path = Path(folder) / f"{h}.json"
    if not path.exists():
        atomic_write_text(path, json.dumps(settings, sort_keys=True, default=str))
    return h


def explain_key_change(before: Iterable[str], now: Iterable[str], folder: str | Path) -> str | None:
    """The changed keys between two recorded settings hashes ("rl.steps: 60 -> 20"), given the
    param values Snakemake compares (reprs: "'<hash>'"); None unless both sides are recorded."""
    def load(values):
        for v in values:
            path = Path(folder) / f"{str(v).strip(chr(39))}.json"
            if path.is_file():
                try:
                    return dict(_leaves(json.loads(path.read_text())))
                except (OSError, ValueError):
                    return None
        return None

    old, new = load(before), load(now)
    if old is None or new is None:
        return None
    return "config keys changed: " + _changed(old, new)


def settings_diff(old: dict, new: dict) -> str:
    """The leaves that differ between two settings mappings ("rollout.max_new_tokens: 32 -> 16")."""
    return "changed: " + _changed(dict(_leaves(json.loads(json.dumps(old, default=str)))),
                                  dict(_leaves(json.loads(json.dumps(new, default=str)))))


def _changed(old: dict, new: dict) -> str:
    unset = "<unset>"
    changed = [f"{k}: {json.dumps(old.get(k, unset), default=str)} -> {json.dumps(new.get(k, unset), default=str)}"
               for k in sorted(set(old) | set(new)) if old.get(k, unset) != new.get(k, unset)]
    return "; ".join(changed) if changed else "none (same settings)"


def main(argv: list[str] | None = None) -> int:
    """`python -m sparserl.core.config FILE [FILE ...]`: merge and validate config files as the DAG
    would. Snakemake parses `--configfile` itself before the Snakefile runs and reports a syntax
    error as only "Config file is not valid JSON or YAML"; this names the file and the line."""
    import sys
    files = sys.argv[1:] if argv is None else argv
    if not files:
        print("usage: python -m sparserl.core.config FILE [FILE ...]", file=sys.stderr)
        return 2
    try:
        load_config(files)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 1
    print(f"{', '.join(files)}: valid")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
