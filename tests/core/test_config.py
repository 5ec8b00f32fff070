from pathlib import Path

import pytest
import yaml

from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["tiny", "small", "paper", "smoke"])
def test_shipped_configs_validate(repo, name):
    cfg = load_config(repo / "configs" / f"{name}.yaml")
    assert cfg["scale"] == name


def test_overlay_validates(repo):
    cfg = load_config([repo / "configs/paper.yaml", repo / "configs/overlays/basis_eval.yaml"])
    assert cfg["evaluation"]["overrides"]["aime24"]["k"] == 32
    assert cfg["evaluation"]["default"]["protocol"] == "greedy"


def test_small_v0_overlay_extends_the_small_stage(repo):
    """The overlay repeats small.yaml's method list (a list replaces, never merges) and adds V0's
    methods: the small stage's runs stay the same runs under it."""
    small = load_config(repo / "configs/small.yaml")
    cfg = load_config([repo / "configs/small.yaml", repo / "configs/overlays/small_v0.yaml"])
    n = len(small["rl"]["methods"])
    assert cfg["rl"]["methods"][:n] == small["rl"]["methods"]
    assert set(cfg["rl"]["methods"][n:]) == {"v05_osla_v0", "v05_k1_v0", "v05_k2_v0", "grpo_budget_v0",
                                             "grpo_budget_oracle"}
    assert cfg["v0"]["harvest"]["policies"] == ["s", "m", "l"] and "v0" not in small
    assert cfg["basis"]["study"]["v05"]["B"] == small["basis"]["study"]["v05"]["B"]  # merged, not replaced


def _bad(tmp_path, repo, text):
    p = tmp_path / "override.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config([repo / "configs/tiny.yaml", p])
    return str(e.value), str(p)


def test_unknown_key_names_key_and_file(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "policies:\n  s: {lrr: 0.1}\n")
    assert path in msg and "policies.s.lrr" in msg and "allowed keys" in msg


def test_wrong_type_names_key_and_file(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "rollout: {max_new_tokens: many}\n")
    assert path in msg and "rollout.max_new_tokens" in msg and "not of type" in msg


def test_unknown_top_level_key(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "seeed: 1\n")
    assert path in msg and "seeed" in msg


def test_error_blames_the_file_that_set_the_key(tmp_path, repo):
    # the bad value lives in tiny.yaml's own keys only when the override does not touch them
    msg, _ = _bad(tmp_path, repo, "evaluation: {default: {protocol: best_of_n}}\n")
    assert "evaluation.default.protocol" in msg and "override.yaml" in msg


def test_semantic_check_hub_policy_needs_name(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "policies:\n  x: {source: hub}\n")
    assert "hf_name" in msg and path in msg


def test_not_a_mapping(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "- 1\n- 2\n")
    assert "mapping" in msg and path in msg


def test_paths_follow_scale_and_stage(repo):
    cfg = load_config(repo / "configs/tiny.yaml")
    P = Paths(cfg)
    assert str(P.train_pool()) == "results/tiny/tasks/train_pool.parquet"
    assert str(P.eval_table("m@p50")) == "results/tiny/eval/m@p50/eval.parquet"
    assert str(P.policy("s")) == "results/tiny/policies/s"
    paper = Paths(load_config(repo / "configs/paper.yaml"))
    assert str(paper.policy("qwen3_4b")) == "models/Qwen/Qwen3-4B-Instruct-2507"  # fetch_models' copy
    assert str(paper.benchmark("aime24")) == "results/paper/tasks/benchmarks/aime24.parquet"


def test_the_resolved_config_keeps_key_order_and_loads_back_the_same(tmp_path, repo):
    """Jobs iterate over mappings such as `policies` (s, m, l): the resolved file must keep the
    order of the config files, and load back to the same config."""
    from sparserl.core.config import load_config, write_resolved
    cfg = load_config(repo / "configs/tiny.yaml")
    path = write_resolved(cfg, tmp_path)
    back = load_config(path)
    assert back == cfg and list(back["policies"]) == list(cfg["policies"]) == ["s", "m", "l"]
    assert list(back) == list(cfg)
    assert write_resolved(cfg, tmp_path) == path  # one file per distinct config


# --------------------------------------------------------------------------- non-finite numbers


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", ".NaN", "-.Inf"])
def test_nan_and_inf_are_refused_naming_file_and_key(tmp_path, repo, text):
    # JSON Schema's exclusiveMinimum lets NaN through; the finite check does not
    msg, path = _bad(tmp_path, repo, f"rl:\n  lr: {text}\n")
    assert path in msg and "key 'rl.lr'" in msg and "must be finite" in msg and "set 'rl.lr'" in msg


def test_nan_is_refused_in_lists_and_free_form_sections(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "rl:\n  eval_fractions: [0.5, .nan]\n")
    assert path in msg and "key 'rl.eval_fractions.1'" in msg
    msg, path = _bad(tmp_path, repo, "rl:\n  openrlhf: {actor: {lr: .inf}}\n")  # no schema below openrlhf
    assert path in msg and "key 'rl.openrlhf.actor.lr'" in msg


def test_nan_in_a_json_config_is_refused(tmp_path, repo):
    import json
    cfg = load_config(repo / "configs/tiny.yaml")
    cfg["verifier"]["timeout_s"] = float("nan")
    f = tmp_path / "cfg.json"
    f.write_text(json.dumps(cfg))  # json writes NaN, and reads it back as a float
    with pytest.raises(ConfigError, match=r"cfg\.json: key 'verifier\.timeout_s' is nan"):
        load_config(f)


def test_rl_policy_must_name_a_policy(tmp_path, repo):
    msg, path = _bad(tmp_path, repo, "rl:\n  policy: zz\n")
    assert path in msg and "key 'rl.policy' = 'zz' names no policy" in msg and "s, m, l" in msg
    msg, path = _bad(tmp_path, repo, "rl:\n  policy: s@p99\n")
    assert path in msg and "names no policy snapshot" in msg


# -------------------------------------------------------------------------------------- command-line overrides

def _tiny_as_snakemake_merges_it(overrides):
    """Snakemake's `config`: the file, with the `--config` entries merged as it got them."""
    from sparserl.core.config import deep_merge, read_yaml
    cfg = read_yaml(REPO / "configs/tiny.yaml")
    for k, v in overrides.items():
        cfg = deep_merge(cfg, {k: v})  # a dotted key stays flat, as Snakemake keeps it
    return cfg


@pytest.mark.parametrize("overrides", [{"rl.steps": "20"}, {"rl": {"steps": "20"}}])
def test_overrides_are_nested_and_typed_by_the_schema(overrides):
    from sparserl.core.config import from_snakemake
    cfg = from_snakemake(_tiny_as_snakemake_merges_it(overrides), [REPO / "configs/tiny.yaml"], overrides)
    assert cfg["rl"]["steps"] == 20 and isinstance(cfg["rl"]["steps"], int)
    assert "rl.steps" not in cfg and cfg["rl"]["lr"] == 3.75e-5  # the rest of rl is the file's


def test_override_values_take_the_schemas_type():
    from sparserl.core.config import override_layers
    got = dict(override_layers({"rl.lr": "1e-4", "rl.policy": "1", "rl.seeds": "[0, 1]",
                                "tasks.chat_template": "true", "rl": {"seeds": ["2"]}, "seed": 3}))
    assert got == {"--config rl.lr=1e-4": {"rl": {"lr": 1e-4}},
                   "--config rl.policy=1": {"rl": {"policy": "1"}},  # a string key keeps the string
                   "--config rl.seeds=[0, 1]": {"rl": {"seeds": [0, 1]}},
                   "--config tasks.chat_template=true": {"tasks": {"chat_template": True}},
                   '--config rl={"seeds": ["2"]}': {"rl": {"seeds": [2]}},
                   "--config seed=3": {"seed": 3}}


@pytest.mark.parametrize("overrides, msg", [
    ({"rl.steps": "abc"}, "--config rl.steps=abc: key 'rl.steps': 'abc' is not of type 'integer'; "
                          "fix the value of 'rl.steps' on the command line"),
    ({"rl": {"steps": "2.5"}}, "--config rl={\"steps\": \"2.5\"}: key 'rl.steps': 2.5 is not of type 'integer'"),
    ({"rl.stepz": "3"}, "--config rl.stepz=3: unknown key 'rl.stepz'"),
    ({"rl.lr": ".inf"}, "--config rl.lr=.inf: key 'rl.lr' is inf; every number must be finite"),
])
def test_a_bad_override_names_the_command_line_not_the_file(overrides, msg):
    from sparserl.core.config import ConfigError, from_snakemake
    with pytest.raises(ConfigError) as e:
        from_snakemake(_tiny_as_snakemake_merges_it(overrides), [REPO / "configs/tiny.yaml"], overrides)
    assert str(e.value).startswith(msg) and "tiny.yaml" not in str(e.value)


def test_overrides_are_echoed_with_the_values_they_replace():
    from sparserl.core.config import describe_overrides
    assert (describe_overrides({"rl.steps": "20", "rl": {"lr": "1e-4"}}, [REPO / "configs/tiny.yaml"])
            == "command-line --config: rl.steps=20 (was 40), rl.lr=0.0001 (was 3.75e-05)")


def test_a_changed_settings_hash_is_explained_by_its_keys(tmp_path):
    from sparserl.core.artifacts import config_hash
    from sparserl.core.config import explain_key_change, settings_key
    old = {"rl": {"steps": 60, "lr": 1e-4}, "seed": 0}
    new = {"rl": {"steps": 20, "lr": 1e-4}, "seed": 0, "extra": [1]}
    a, b = settings_key(old, tmp_path), settings_key(new, tmp_path)
    assert a == config_hash(old)  # the hash params of built outputs stay what they were
    assert (explain_key_change({repr(a)}, {repr(b)}, tmp_path)
            == 'config keys changed: extra: "<unset>" -> [1]; rl.steps: 60 -> 20')
    assert explain_key_change({"'0123456789abcdef'"}, {repr(b)}, tmp_path) is None  # never recorded


def test_an_overlay_on_the_wrong_scale_names_the_harvest_policies(repo):
    """configs/overlays/small_v0.yaml harvests s, m, l: on a config without them the error comes at
    load time and names the key, not when a workflow file is parsed."""
    with pytest.raises(ConfigError, match=r"small_v0\.yaml.*v0\.harvest\.policies names \['s', 'm', 'l'\]"):
        load_config([str(repo / "configs/openrlhf_cpu.yaml"), str(repo / "configs/overlays/small_v0.yaml")])


def test_the_second_start_overlays_load_over_tiny_and_small(repo):
    """configs/overlays/start1.yaml is another start policy's tree over either scale (its
    own results, start_seed 1, methods of tiny's and small's rl.methods, small's rates read from the
    first tree), and pool_start1.yaml pools it; tiny keeps start 0 and no pool."""
    from sparserl.core.config import start_seed
    from sparserl.engines.lr_tuning import borrowed
    for scale in ("tiny", "small"):
        base = load_config(repo / f"configs/{scale}.yaml")
        s1 = load_config([repo / f"configs/{scale}.yaml", repo / "configs/overlays/start1.yaml"])
        assert (start_seed(base), start_seed(s1)) == (0, 1) and "start_seed" not in base["pretrain"]
        assert s1["results_dir"] != base.get("results_dir", "results")
        assert set(s1["rl"]["methods"]) < set(base["rl"]["methods"]) and set(s1["ood"]["methods"]) <= set(s1["rl"]["methods"])
        assert borrowed(s1) == (Path(f"results/{scale}/tuning/lr.json") if scale == "small" else None)
        pooled = load_config([repo / f"configs/{scale}.yaml", repo / "configs/overlays/pool_start1.yaml"])
        assert pooled["head_to_head"]["pool"] == ["configs/overlays/start1.yaml"] and "head_to_head" not in base


def test_config_show_names_where_each_value_came_from(tmp_path, capsys):
    """`sparserl config show`: a value a file sets names the file, a --set names the command line
    (typed by the schema), an unset one the defaults; --key filters; a --set without '=' fails."""
    import pytest
    from sparserl.cli import main
    from sparserl.cli.config import origins
    repo = Path(__file__).resolve().parents[2]
    over = tmp_path / "over.yaml"
    over.write_text("rl:\n  lr: 0.002\n")
    cfg, rows = origins([str(repo / "configs/tiny.yaml"), str(over)], ["rl.steps=7"])
    where = {k: w for k, _, w in rows}
    value = {k: v for k, v, _ in rows}
    assert where["rl.lr"] == str(over) and value["rl.lr"] == 0.002
    assert where["rl.steps"] == "--config rl.steps=7" and value["rl.steps"] == 7 == cfg["rl"]["steps"]
    assert where["rl.policy"] == str(repo / "configs/tiny.yaml")
    assert where["results_dir"] == "default"
    # a schema default the config leaves unset is listed, marked default, once; a set key once too
    assert "micro_batch_size" not in cfg["rl"] and (value["rl.micro_batch_size"], where["rl.micro_batch_size"]) == (
        256, "default")
    assert (value["basis.oracle_n"], where["basis.oracle_n"]) == (cfg["basis"]["oracle_n"], str(repo / "configs/tiny.yaml"))
    keys = [k for k, _, _ in rows]
    assert len(keys) == len(set(keys))
    assert where["critique.rl.checkpoint_every"] == "default"  # through critique.rl's allOf $ref
    assert main(["config", "show", "--config", str(repo / "configs/tiny.yaml"), "--key", "rl.lr"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rl.lr ") and "configs/tiny.yaml]" in out and "rl.steps" not in out
    with pytest.raises(SystemExit, match="give key=value"):
        origins([str(repo / "configs/tiny.yaml")], ["rl.steps"])


def test_load_layers_is_what_load_config_merges(tmp_path):
    """load_config merges load_layers' layers: the schema's FILLED_KEYS defaults first (named
    `default`), then each file; config show reads the same layers, so it cannot drift from it."""
    from sparserl.core.config import DEFAULT_LAYER, FILLED_KEYS, load_layers, merge_layers
    repo = Path(__file__).resolve().parents[2]
    over = tmp_path / "over.yaml"
    over.write_text("threads: 1\n")
    layers = load_layers([repo / "configs/tiny.yaml", over], {"rl.steps": "3"}, command_line=True)
    assert [n for n, _ in layers][:3] == [DEFAULT_LAYER, str(repo / "configs/tiny.yaml"), str(over)]
    assert set(layers[0][1]) == set(FILLED_KEYS)
    cfg = merge_layers(layers)
    assert cfg["threads"] == 1 and cfg["rl"]["steps"] == 3
    assert load_config([repo / "configs/tiny.yaml", over]) == merge_layers(load_layers([repo / "configs/tiny.yaml", over]))
