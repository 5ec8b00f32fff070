"""Every config default has one home, the schema (src/sparserl/core/config.schema.yaml): code
reads defaults through `core.config.setting` / `section_setting` / `schema_default(s)`, never a
module DEFAULTS dict or a literal `.get(key, number)`, and defaults are never written into the
resolved config, whose hash keys every artifact."""
from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from sparserl.core.artifacts import config_hash
from sparserl.core.config import (FILLED_KEYS, _resolve_ref, _schema, _schema_node, deep_merge, load_config,
                                  read_yaml, schema_default, section_setting, setting)

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "sparserl"


def _sources() -> list[tuple[Path, ast.Module]]:
    out = []
    for p in sorted(SRC.rglob("*.py")):
        out.append((p, ast.parse(p.read_text(), str(p))))
    return out


def _schema_keys(root) -> set[str]:
    """Every property name of the schema."""
    names: set[str] = set()

    def walk(node, path=()):
        if isinstance(node, dict):
            for k, v in node.items():
                if path[-1:] == ("properties",):
                    names.add(k)
                walk(v, path + (k,))
    walk(root)
    return names


# `.get(key, constant)` on a dict that is not the config whose key shares a schema key's name:
# (file, the call as ast.unparse writes it) -> why it is not a config default
NOT_CONFIG = {
    ("src/sparserl/envs/codeio.py", "p.meta.get('source', 'procedural')"):
        "a problem's meta row, not the env spec",
    ("src/sparserl/rollout/cpu_engine.py", "rope.get('type', 'default')"):
        "a Hugging Face model config's rope_scaling",
    ("src/sparserl/studies/world_compare.py", "meta.get('scale', 'unknown')"): "a table's manifest",
    ("src/sparserl/figures/registry.py", "(cfg or {}).get('scale', '?')"):
        "scale is required (no default); '?' marks a table shown without its config",
}


def test_no_module_defaults_dict_nor_literal_default_of_a_schema_key():
    """Fails on main (tasks.worked.DEFAULTS, studies.DEFAULTS, ..., `.get("reference_n", 64)`,
    `.get("greedy", True)`, `.get("results_dir", "results")`), and on a new `FOO_DEFAULTS = {...}`
    or `cfg["rl"].get("checkpoint_every", 10)` / `.get("precision", "fp32")` anywhere."""
    schema_keys = _schema_keys(_schema())
    assert {"reference_n", "checkpoint_every", "micro_batch_size", "slip_share"} <= schema_keys
    assert {"nodes", "v0_threads"} <= schema_keys  # the SLURM resources and the OpenRLHF launcher too
    assert {"greedy", "results_dir", "precision", "allow_weak"} <= schema_keys
    dicts, literals, skipped = [], [], set()
    for path, tree in _sources():
        rel = path.relative_to(REPO)
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id.endswith("DEFAULTS") and isinstance(node.value, ast.Dict):
                    dicts.append(f"{rel}:{node.lineno} {t.id}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in schema_keys and _is_constant(node.args[1])):
                if (str(rel), ast.unparse(node)) in NOT_CONFIG:
                    skipped.add((str(rel), ast.unparse(node)))
                    continue
                literals.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert not dicts, "module-level DEFAULTS dicts (move them into the schema): " + "; ".join(dicts)
    assert not literals, "literal defaults of schema keys (read them with setting): " + "; ".join(literals)
    assert skipped == set(NOT_CONFIG), f"NOT_CONFIG entries no source has: {sorted(set(NOT_CONFIG) - skipped)}"
    rules = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    smk = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in rules
           for m in re.finditer(r'\.get\("([a-z_]+)", *(-?[0-9][0-9.e-]*|"[^"]*"|\'[^\']*\'|True|False|None)\)',
                                p.read_text())
           if m.group(1) in schema_keys]
    assert not smk, "literal defaults in rules: " + "; ".join(smk)


def _is_constant(node) -> bool:
    """A literal number, string, boolean or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float, str, bool))


# how each accessor names its schema path: (function name, leading fixed keys, first key arg)
ACCESSORS = {"setting": ((), 1), "section_setting": ((), 1), "schema_default": ((), 0),
             "schema_defaults": ((), 0), "with_defaults": ((), 1), "schema_default_by": ((), 1),
             "_d": (("$defs", "method"), 0),  # methods.spec: a method file's default
             "_setting": (("$defs", "env_minif2f"), 0)}  # envs.minif2f
METHODS = {"setting": ("$defs", "trainer")}  # Trainer.setting(key): the trainer's rl settings


def _read_paths() -> list[tuple[str, tuple]]:
    """(where, schema key path) of every call of a default accessor with constant keys."""
    out = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                if name not in METHODS and name != "_setting":
                    continue
                lead, first = (METHODS[name], 0) if name in METHODS else ACCESSORS[name]
            elif name in ACCESSORS and name not in ("_setting",):
                lead, first = ACCESSORS[name]
            else:
                continue
            args = node.args[first:]
            if not args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
                continue  # a key from a variable (e.g. critique.envs.<name>): checked by the tests that run it
            out.append((f"{path.relative_to(REPO)}:{node.lineno} {name}", lead + tuple(a.value for a in args)))
    return out


def test_every_setting_code_reads_has_a_default_and_a_description():
    """Fails when code reads a setting through the accessor the schema gives no default or no
    description (a KeyError only the run that reaches it would raise), e.g. a typo'd key path."""
    reads = _read_paths()
    assert len(reads) > 60 and any(p == ("basis", "reference_n") for _, p in reads)
    assert any(p == ("$defs", "trainer", "checkpoint_every") for _, p in reads)
    bad = []
    for where, keys in reads:
        node = _schema_node(keys)
        if node is None:
            bad.append(f"{where}: {'.'.join(keys)} is not in the schema")
            continue
        whole = where.endswith(("schema_defaults", "with_defaults"))
        has_default = whole or "default" in node or any(k.startswith("default_by_") for k in node)
        if not has_default:
            bad.append(f"{where}: {'.'.join(keys)} has no default")
        leaves = _default_nodes(node) if whole else [(keys, node)]
        bad += [f"{where}: {'.'.join(map(str, k))} has no description" for k, n in leaves
                if not n.get("description")]
    assert not bad, "\n".join(bad)


def _default_nodes(node, keys=()):
    out = []
    for k, sub in (node.get("properties") or {}).items():
        sub = _resolve_ref(sub, _schema())
        if "default" in sub:
            out.append((keys + (k,), sub))
        elif sub.get("properties"):
            out += _default_nodes(sub, keys + (k,))
    return out


def test_setting_reads_the_cfg_else_the_schema_default():
    """A value the cfg sets wins (null included); an unset one is the schema's; a key path the
    schema gives no default is a KeyError naming it. Fails if `setting` wrote the default into
    the cfg (hashes) or fell back on a missing section silently."""
    cfg = {"basis": {"reference_n": 8, "oracle_n": None}}
    assert setting(cfg, "basis", "reference_n") == 8 and setting(cfg, "basis", "oracle_n") is None
    assert setting(cfg, "basis", "reference_shards") == 1 == schema_default("basis", "reference_shards")
    assert setting({}, "rl", "checkpoint_every") == 10 == setting({"rl": None}, "rl", "checkpoint_every")
    assert cfg == {"basis": {"reference_n": 8, "oracle_n": None}}
    with pytest.raises(KeyError, match=r"rl\.steps"):
        setting({}, "rl", "steps")
    with pytest.raises(KeyError, match=r"rl\.no_such_key"):
        setting({"rl": {}}, "rl", "no_such_key")
    assert section_setting({"k": 4}, "$defs", "sampling", "k") == 4
    assert section_setting({}, "$defs", "sampling", "k") == 16
    # a default returned is a copy: mutating it cannot change the next reader's default
    fr = setting({}, "basis", "study_checkpoints", "fractions")
    fr.append(2.0)
    assert setting({}, "basis", "study_checkpoints", "fractions") == [0.25, 0.5, 1.0]


def _files_merged(files) -> dict:
    out: dict = {k: schema_default(k) for k in FILLED_KEYS}
    for f in files:
        out = deep_merge(out, read_yaml(f) or {})
    return out


@pytest.mark.parametrize("files", [["configs/tiny.yaml"], ["configs/small.yaml", "configs/overlays/small_v0.yaml"]])
def test_resolved_config_holds_no_default_the_files_do_not_set(files):
    """Hash stability: the resolved config is the files merged over FILLED_KEYS and nothing
    else, so a default added to the schema cannot change a config hash (run keys, policy keys,
    the resolved config's name). Fails if load_config merged the schema's defaults in."""
    paths = [REPO / f for f in files]
    cfg = load_config(paths)
    assert json.dumps(cfg, sort_keys=True) == json.dumps(_files_merged(paths), sort_keys=True)
    assert {k: cfg[k] for k in FILLED_KEYS} == {"results_dir": "results", "figures_dir": "paper_figures",
                                                "threads": 2}  # what every config carried before


def test_small_config_hash_is_the_published_tables_hash():
    """configs/small.yaml + overlays/small_v0.yaml hash as the published small tables' manifests
    record (made at an older commit): the tables stay this config's. Fails if a default is
    written into the resolved config, or FILLED_KEYS' values change."""
    manifests = sorted((REPO / "published/small/results/tasks/benchmarks").glob("*.manifest.json"))
    assert manifests
    published = Counter(json.loads(m.read_text())["config_hash"] for m in manifests).most_common(1)[0][0]
    cfg = load_config([REPO / "configs/small.yaml", REPO / "configs/overlays/small_v0.yaml"])
    assert config_hash(cfg) == published


def test_method_defaults_come_from_the_schema(tmp_path):
    """MethodSpec's defaults are the schema's $defs/method (one home), its files are validated
    against it, and the specs (hashed into run keys) are what they were: fails if a dataclass
    default drifts from the schema or a default changes a method's dict."""
    from sparserl.core.config import ConfigError
    from sparserl.methods.spec import CriticSpec, OslaSpec, load_method, method_schema
    assert CriticSpec().lr == schema_default("$defs", "method", "critic", "lr")
    assert OslaSpec(k_init=4).c == schema_default("$defs", "method", "osla", "c") == 0.0039
    assert method_schema()["properties"]["critic"]["properties"]["warmup_updates"]["default"] == 20
    # run keys hash these dicts: the hashes at the commit before the defaults moved
    pinned = {"grpo_g16": "732c845d1a12821e", "dapo_g16": "2fa5832de3db5f6a", "lc_vf": "1f7fd5b6e44b3261",
              "v05_osla_v0": "46acdc4cb53e1483"}
    assert {n: config_hash(load_method(n).to_dict()) for n in pinned} == pinned
    gspo = load_method("gspo_g8").loss
    assert (gspo.clip_low, gspo.clip_high) == (3e-4, 4e-4)  # default_by_type
    (tmp_path / "typo.yaml").write_text((REPO / "configs/methods/grpo_g16.yaml").read_text() + "kl_coeff: 0.1\n")
    with pytest.raises(ConfigError, match="kl_coeff"):
        load_method("typo", tmp_path)
