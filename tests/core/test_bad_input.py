"""Bad input names its file, line and field: config and method YAML, the step
size, estimator eps and huge rewards, zero reference rollouts."""
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from sparserl.core.config import ConfigError, load_config
from sparserl.estimators.group import (EstimatorContext, dr_grpo_advantage, gpg_advantage, grpo_advantage,
                                       grpo_baseline, reinforce_pp_advantage, reinforce_pp_baseline,
                                       rloo_advantage, rloo_baseline)
from sparserl.estimators.shrinkage import v05_advantage
from sparserl.methods.spec import load_method, prompts_per_step
from sparserl.values.priors import prior_for_method, reference_values

BAD_SYNTAX = "seed: 0\nrl:\n  steps: [1, 2\n  lr: 3\n"  # flow sequence never closed


def snakemake(snakefile, workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------- config YAML


def test_config_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_SYNTAX)
    with pytest.raises(ConfigError, match=r"bad\.yaml, line 4, column 5: not valid YAML: expected ',' or "
                                          r"'\]'.*flow sequence on line 3"):
        load_config(bad)


def test_duplicate_config_key_is_rejected_with_both_lines(tmp_path, repo):
    text = (repo / "configs/smoke.yaml").read_text()
    bad = tmp_path / "dup.yaml"
    bad.write_text("seed: 7\n" + text)  # smoke.yaml sets seed again further down
    line = 1 + next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("seed:"))
    with pytest.raises(ConfigError, match=rf"dup\.yaml, line {line}, column 1: .*duplicate key 'seed' "
                                          r"\(first set on line 1\); keep one of the two"):
        load_config(bad)
    # a nested duplicate too, and in JSON
    (tmp_path / "nested.yaml").write_text("rl:\n  steps: 1\n  steps: 2\n")
    with pytest.raises(ConfigError, match=r"nested\.yaml, line 3, column 3: .*duplicate key 'steps'"):
        load_config(tmp_path / "nested.yaml")
    (tmp_path / "dup.json").write_text('{"seed": 0, "seed": 1}')
    with pytest.raises(ConfigError, match=r"dup\.json: .*duplicate key 'seed'"):
        load_config(tmp_path / "dup.json")


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    from sparserl.core.config import read_yaml
    f = tmp_path / "merge.yaml"
    f.write_text("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n")
    assert read_yaml(f)["m"] == {"x": 3, "y": 2}


def test_libyaml_and_pure_python_loaders_read_every_shipped_yaml_alike(repo):
    """read_yaml parses with libyaml where PyYAML has it and falls back to the pure-Python loader
    for a file that fails (the messages above); both must read every shipped file to equal values,
    and both must refuse a duplicate key."""
    from sparserl.core import config
    if config._FAST_LOADER is None:
        pytest.skip("PyYAML without libyaml: read_yaml has one loader")
    files = sorted(p for d in ("configs", "workflow", "profiles") for p in (repo / d).rglob("*.yaml"))
    assert len(files) > 50, files
    for f in files:
        text = f.read_text()
        assert config._FAST_LOADER(text).get_single_data() == config.UniqueKeyLoader(text).get_single_data(), f
    for loader in (config._FAST_LOADER, config.UniqueKeyLoader):
        with pytest.raises(config.DuplicateKeyError, match="duplicate key 'y'"):
            loader("x:\n  y: 1\n  y: 2\n").get_single_data()


def test_an_edited_method_file_is_read_anew(tmp_path, repo):
    """load_method caches specs by the file's bytes: an edit in place is seen at once."""
    from sparserl.methods.spec import load_method
    src = (repo / "configs/methods/grpo_g4.yaml").read_text()
    (tmp_path / "m.yaml").write_text(src)
    assert load_method("m", tmp_path).group_size == 4
    (tmp_path / "m.yaml").write_text(src.replace("group_size: 4", "group_size: 8"))
    assert load_method("m", tmp_path).group_size == 8


def test_config_byte_that_is_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"seed: 0\n" * 5000 + b"scale: caf\xe9\n")  # past any read buffer
    with pytest.raises(ConfigError, match=r"latin1\.yaml, line 5001: byte 0xe9 is not UTF-8"):
        load_config(f)


def test_config_checker_names_file_and_line(tmp_path, repo):
    """Snakemake parses --configfile itself and says only "not valid JSON or YAML"; the checker the
    Snakefile's comment points to names the file and line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_SYNTAX)
    out = subprocess.run([sys.executable, "-m", "sparserl.core.config", str(bad)], capture_output=True,
                         text=True, cwd=repo)
    assert out.returncode == 1 and f"{bad}, line 4, column 5: not valid YAML" in out.stderr
    ok = subprocess.run([sys.executable, "-m", "sparserl.core.config", str(repo / "configs/smoke.yaml")],
                        capture_output=True, text=True, cwd=repo)
    assert ok.returncode == 0 and "valid" in ok.stdout


@pytest.mark.e2e  # Snakemake dry run
def test_snakemake_configfile_with_a_syntax_error_names_file_and_line(repo, tmp_path):
    """Snakemake parses --configfile before any Snakefile code; our logger plugin (imported while
    Snakemake builds its command line) makes that parse name the file, line and column."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_SYNTAX)
    out = snakemake(repo / "Snakefile", tmp_path / "wd", "all", "--cores", "1", "-n", "--configfile", str(bad))
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"{bad}, line 4, column 5: not valid YAML: expected ',' or ']'" in log, log[-2000:]
    assert "python -m sparserl.core.config" in log
    # a target after --configfile (which takes every word after it) is read as a config file:
    # one line that says so, not open()'s traceback
    (tmp_path / "wd" / "results").mkdir(parents=True)
    for word, what in (("absent.yaml", "does not exist"), ("results", "is a folder")):
        out = snakemake(repo / "Snakefile", tmp_path / "wd", "-n", "--cores", "1", "--configfile",
                        str(repo / "configs/smoke.yaml"), str(tmp_path / "wd" / word))
        log = out.stdout + out.stderr
        assert out.returncode != 0 and f"{tmp_path / 'wd' / word} {what}; --configfile reads every word" in log, log[-2000:]
        assert "Traceback" not in log and "not valid YAML" not in log, log[-2000:]


def test_sparserl_logger_plugin_is_a_valid_snakemake_plugin():
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry
    assert "sparserl" in LoggerPluginRegistry().plugins


@pytest.mark.e2e  # Snakemake dry run
def test_snakemake_configfile_with_a_duplicate_key_names_file_and_line(repo, tmp_path):
    bad = tmp_path / "dup.yaml"
    bad.write_text((repo / "configs/smoke.yaml").read_text() + "seed: 1\n")
    out = snakemake(repo / "Snakefile", tmp_path / "wd", "all", "--cores", "1", "-n", "--configfile", str(bad))
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-2000:]
    assert f"{bad}, line" in log and "duplicate key 'seed'" in log


@pytest.mark.e2e  # Snakemake dry run
def test_snakemake_default_config_with_a_syntax_error_names_file_and_line(repo, tmp_path):
    """The `configfile:` directive (no --configfile): our parse runs first and names the line."""
    wf = tmp_path / "wf"
    (wf / "configs").mkdir(parents=True)
    shutil.copy(repo / "Snakefile", wf / "Snakefile")
    for d in ("src", "workflow"):
        (wf / d).symlink_to(repo / d)
    (wf / "configs/tiny.yaml").write_text(BAD_SYNTAX)
    out = snakemake(wf / "Snakefile", tmp_path / "wd", "all", "--cores", "1", "-n")
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert "tiny.yaml, line 4, column 5: not valid YAML" in log, log[-2000:]


@pytest.mark.e2e  # Snakemake dry run
def test_snakemake_rejects_a_step_smaller_than_a_group(repo, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    text, n = re.subn(r"\n  rollouts_per_step: \d+\n", "\n  rollouts_per_step: 8\n",
                      (repo / "configs/tiny.yaml").read_text())
    assert n == 1  # rl's (critique.rl's is indented deeper)
    cfg.write_text(text)
    out = snakemake(repo / "Snakefile", tmp_path / "wd", "all", "--cores", "1", "-n", "--configfile", str(cfg))
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"{cfg}: rl.rollouts_per_step = 8 is below the group_size 16 of method 'grpo_g16'" in log, log[-2000:]


# --------------------------------------------------------------------------- method YAML


def test_method_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "m.yaml").write_text("estimator: grpo\ngroup_size: 4\nloss: {type: ppo_clip\n")
    with pytest.raises(ConfigError, match=r"m\.yaml, line 4, column 1: not valid YAML"):
        load_method("m", tmp_path)


def test_method_duplicate_key_is_rejected(tmp_path):
    (tmp_path / "m.yaml").write_text("estimator: grpo\ngroup_size: 4\nloss: {type: ppo_clip}\ngroup_size: 8\n")
    with pytest.raises(ConfigError, match=r"m\.yaml, line 4, column 1: .*duplicate key 'group_size' "
                                          r"\(first set on line 2\)"):
        load_method("m", tmp_path)


def test_method_that_is_not_a_mapping(tmp_path):
    (tmp_path / "m.yaml").write_text("- grpo\n")
    with pytest.raises(ConfigError, match=r"m\.yaml: top level must be a mapping"):
        load_method("m", tmp_path)


# --------------------------------------------------------------------------- step size


def test_rollouts_per_step_below_the_group_size_is_rejected():
    m = load_method("grpo_g16")
    with pytest.raises(ConfigError, match=r"rl\.rollouts_per_step = 8 is below the group_size 16 of method "
                                          r"'grpo_g16'.*set rl\.rollouts_per_step to a multiple of 16"):
        prompts_per_step(m, 8)
    assert prompts_per_step(m, 16) == 1 and prompts_per_step(m, 512) == 32


# --------------------------------------------------------------------------- estimators


@pytest.mark.parametrize("call", [
    lambda: grpo_advantage([1.0, 1.0], [0, 0], eps=0),
    lambda: grpo_advantage([1.0, 1.0], [0, 0], ctx=EstimatorContext(eps=0.0)),
    lambda: reinforce_pp_advantage([1.0, 1.0], [0, 1], eps=0.0),
    lambda: v05_advantage([1.0, 1.0], [0, 0], ctx=EstimatorContext(prior={0: 1.0}), eps=0.0),
])
def test_eps_zero_is_rejected(call):
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0"):
        call()


def test_huge_opposite_rewards_give_the_scale_free_grpo_advantage():
    a = grpo_advantage([1e200, -1e200], [0, 0])
    np.testing.assert_allclose(a, [2 ** -0.5, -(2 ** -0.5)], rtol=1e-12)
    np.testing.assert_allclose(reinforce_pp_advantage([1e300, -1e300], [0, 1]), [1.0, -1.0], rtol=1e-12)


def test_huge_rewards_stay_finite_and_match_scaled_inputs():
    """Every group baseline is linear in the rewards: f(r) = 2**k f(r / 2**k)."""
    r = np.array([1e308, 1e308, -1e308, 1e307, 0.0, 1.0])
    ids = [0, 0, 0, 0, 1, 1]
    small = r / 2.0 ** 1000
    for f in (rloo_advantage, gpg_advantage, dr_grpo_advantage, grpo_baseline, rloo_baseline,
              reinforce_pp_baseline):
        got = f(r, ids)
        assert np.isfinite(got).all(), f.__name__
        np.testing.assert_allclose(got[:4], f(small, ids)[:4] * 2.0 ** 1000, rtol=1e-12, err_msg=f.__name__)
    # the small group keeps its own scale: GRPO of [0, 1] as if alone
    a = grpo_advantage(r, ids)
    np.testing.assert_array_equal(a[4:], grpo_advantage([0.0, 1.0], [1, 1]))
    np.testing.assert_allclose(a[:4], grpo_advantage(small, ids)[:4], rtol=1e-9)


def test_advantage_beyond_float64_is_rejected_naming_the_index():
    with pytest.raises(ValueError, match=r"rewards\[1\] = 1\.7e\+308 exceeds float64"):
        rloo_advantage([0.0, 1.7e308, -1.7e308], [0, 0, 0])  # A_1 = 1.7e308 + 0.85e308
    with pytest.raises(ValueError, match=r"rewards\[0\] = 1\.7e\+308 exceeds float64"):
        dr_grpo_advantage([1.7e308, -1.7e308, -1.7e308], [0, 0, 0])


def test_ordinary_rewards_keep_the_exact_arithmetic():
    """The overflow guard must not touch {0,1} or moderate rewards: bit-identical to the formula."""
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(20), 8)
    for r in (rng.integers(0, 2, 160).astype(float), rng.normal(0, 1e6, 160)):
        b = np.bincount(ids, r) / 8
        dev = r - b[ids]
        std = np.sqrt(np.bincount(ids, dev * dev) / 7)
        assert np.array_equal(grpo_advantage(r, ids), dev / (std[ids] + 1e-6))
        assert np.array_equal(dr_grpo_advantage(r, ids), r - b[ids])
        assert np.array_equal(rloo_advantage(r, ids), r - (np.bincount(ids, r)[ids] - r) / 7)


# --------------------------------------------------------------------------- zero rollouts


def test_reference_values_with_zero_rollouts_names_the_prompt_and_cache():
    ref = pd.DataFrame({"prompt_id": ["a", "b"], "successes": [3, 0], "n": [4, 0]})
    with pytest.raises(ValueError, match=r"results/x/ref\.parquet has n = 0 rollouts for prompt 'b' \(row 1"):
        reference_values(ref, source="results/x/ref.parquet")
    with pytest.raises(ValueError, match=r"the reference cache has n = 0 rollouts for prompt 'b'"):
        prior_for_method({"kind": "oracle", "pseudo_count": 0.5}, ref, seed=0)


def test_hf_backend_returns_no_text_for_zero_rollouts(tiny_lm):
    from sparserl.rollout import SamplingParams
    from sparserl.rollout.hf import HFBackend
    model, tok = tiny_lm
    backend = HFBackend(model, tok, batch_size=4)
    params = SamplingParams(max_new_tokens=4)
    b = backend.generate(["Q: 1 + 2 =\nA:"], 0, params, seed=1)
    assert len(b) == 0 and b.texts == [] and b.response_ids == []
    b = backend.generate(["Q: 1 + 2 =\nA:", "Q: 3 =\nA:"], [0, 2], params, seed=1)
    assert len(b.texts) == 2 and b.prompt_index.tolist() == [1, 1]


# -------------------------------------------------------------------------------------- non-finite numbers


def _override(tmp_path, text):
    f = tmp_path / "override.yaml"
    f.write_text(text)
    return f


def test_rl_train_with_a_nan_lr_stops_at_load_time(repo, tmp_path):
    """`rl.lr: .nan` passes JSON Schema's exclusiveMinimum; it must stop rl-train before a step."""
    over = _override(tmp_path, f"results_dir: {tmp_path / 'results'}\nrl:\n  lr: .nan\n")
    out = subprocess.run([sys.executable, "-m", "sparserl", "rl-train", "--config", "configs/tiny.yaml",
                          str(over), "--method", "grpo_g4", "--seed", "0"],
                         capture_output=True, text=True, cwd=repo, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{over}: key 'rl.lr' is nan; every number must be finite" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "results").exists()


def _method(tmp_path, text, name="m"):
    (tmp_path / f"{name}.yaml").write_text(text)
    return lambda: load_method(name, tmp_path)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_method_nan_clip_is_refused(tmp_path, value):
    load = _method(tmp_path, f"estimator: grpo\ngroup_size: 4\nloss: {{type: ppo_clip, clip_low: {value}}}\n")
    with pytest.raises(ConfigError, match=rf"m\.yaml: key 'loss\.clip_low' is -?(nan|inf); every number "
                                          r"must be finite"):
        load()


@pytest.mark.parametrize("beta", ["-1", "0", ".nan", ".inf", "-.inf", "nan", "'-inf'"])
def test_basis_beta_must_be_positive(tmp_path, beta):
    load = _method(tmp_path, "estimator: basis_unb\ngroup_size: 1\nloss: {type: ppo_clip}\n"
                             f"basis: {{kind: unb, beta: {beta}}}\n")
    with pytest.raises(ConfigError, match=r"m\.yaml: key 'basis\.beta'"):
        load()


def test_basis_beta_accepts_positive_numbers_inf_and_calibrate(tmp_path):
    for beta, want in (("0.5", 0.5), ("inf", np.inf), ("calibrate", None)):
        load = _method(tmp_path, "estimator: basis_unb\ngroup_size: 1\nloss: {type: ppo_clip}\n"
                                 f"basis: {{kind: unb, beta: {beta}}}\n")
        assert load().basis.fixed_beta() == want


def test_osla_nan_cost_and_infinite_steps_factor_are_refused(tmp_path):
    osla = "estimator: v05_fusion\ngroup_size: 4\nloss: {type: ppo_clip}\nprior: {kind: constant}\n"
    with pytest.raises(ConfigError, match=r"m\.yaml: key 'osla\.c' is nan"):
        _method(tmp_path, osla + "osla: {k_init: 4, c: .nan}\n")()
    with pytest.raises(ConfigError, match=r"m\.yaml: osla: k_max 0 .* is below k_init 4"):
        _method(tmp_path, osla + "osla: {k_init: 4, c: 2.0}\n")()
    grpo = "estimator: grpo\ngroup_size: 4\nloss: {type: ppo_clip}\n"
    with pytest.raises(ConfigError, match=r"m\.yaml: key 'steps_factor' is inf"):
        _method(tmp_path, grpo + "steps_factor: .inf\n")()
    from sparserl.methods.spec import total_steps
    huge = _method(tmp_path, grpo + "steps_factor: 1.0e+300\n", "huge")()
    with pytest.raises(ConfigError, match=r"steps_factor 1e\+300 of method 'huge' gives 6e\+301 steps, more "
                                          r"than a run can hold"):
        total_steps({"steps": 60}, huge)


# --------------------------------------------------------------------------- budgets are never rounded


def test_rollouts_per_step_not_a_multiple_of_the_group_is_rejected():
    m = load_method("rloo_g8")
    with pytest.raises(ConfigError, match=r"rl\.rollouts_per_step = 12 is not a multiple of the group_size 8 "
                                          r"of method 'rloo_g8', so its steps would train 8 rollouts, not 12; "
                                          r"set rl\.rollouts_per_step to a multiple of 8 \(nearest: 8 or 16\)"):
        prompts_per_step(m, 12)
    assert prompts_per_step(m, 24) == 3


@pytest.mark.parametrize("name", ["tiny", "small", "paper"])
def test_shipped_budgets_are_whole_groups_for_every_method(repo, name):
    cfg = load_config(repo / f"configs/{name}.yaml")
    for method in cfg["rl"]["methods"]:
        m = load_method(method)
        if m.prompts_per_step is not None:  # the matched-prompts protocol: its own prompts, any budget
            assert prompts_per_step(m, cfg["rl"]["rollouts_per_step"]) == m.prompts_per_step
            continue
        assert prompts_per_step(m, cfg["rl"]["rollouts_per_step"]) * m.group_size == cfg["rl"]["rollouts_per_step"]


# --------------------------------------------------------------------------- the estimator registry's boundary


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow warnings on the way
@pytest.mark.parametrize("name", ["basis_unb", "basis_vop"])
def test_basis_with_rewards_of_1e308_fails_naming_the_estimator(name):
    from sparserl.estimators import get_estimator
    ctx = EstimatorContext(phat=np.array([0.5, 0.3, 0.6, 0.2]))
    with pytest.raises(ValueError, match=rf"estimator '{name}': its advantages hold -?inf at index 0 .*"
                                         r"so large that float64 overflows"):
        get_estimator(name)(np.array([1e308, 0.0, 1e308, 1.0]), np.arange(4), ctx=ctx)


@pytest.mark.parametrize("out, match", [
    (lambda r: np.array([0.0, np.nan, 0.0]), r"its advantages hold nan at index 1 \(1 of 3 non-finite\)"),
    (lambda r: np.zeros(2), r"its advantages has shape \(2,\), expected \(3,\) \(one per rollout\)"),
    (lambda r: np.zeros(3, dtype=int), r"its advantages has dtype int64, not float"),
])
def test_the_registry_checks_every_estimators_output(out, match):
    import sparserl.estimators as E

    @E.register_estimator("_t_bad_out")
    def bad(rewards, prompt_ids, **_):
        return out(rewards)

    try:
        with pytest.raises(ValueError, match=r"estimator '_t_bad_out': " + match):
            E.get_estimator("_t_bad_out")([0.0, 1.0, 0.0], [0, 0, 0])
    finally:
        del E.ESTIMATOR_REGISTRY["_t_bad_out"]


def test_the_registry_checks_token_estimators_against_the_mask():
    import sparserl.estimators as E

    @E.register_estimator("_t_bad_tok", needs=("values",), level="token")
    def bad(rewards, prompt_ids, *, values, mask, **_):
        return np.where(np.asarray(mask), np.asarray(values), 0.0)[:, :1]  # loses the second token

    try:
        mask = np.array([[True, True], [True, False]])
        values = np.array([[0.5, 0.25], [0.5, 0.0]])
        with pytest.raises(ValueError, match=r"estimator '_t_bad_tok': its advantages has shape \(2, 1\), "
                                             r"expected \(2, 2\) \(the mask's shape"):
            E.get_estimator("_t_bad_tok")([1.0, 0.0], [0, 0], values=values, mask=mask)
    finally:
        del E.ESTIMATOR_REGISTRY["_t_bad_tok"]


# --------------------------------------------------------------------------- golds


@pytest.mark.parametrize("answer, match", [
    ([1, None], r"field 'answer' holds a null item \(\[1, None\]\); remove the null"),
    (float("nan"), r"field 'answer' is nan, not a gold answer"),
    (["2", float("inf")], r"field 'answer' holds inf"),
])
def test_gold_with_a_null_item_or_nan_is_named(tmp_path, answer, match):
    import json
    from sparserl.data.benchmarks import load_benchmark
    f = tmp_path / "amc23.jsonl"
    f.write_text(json.dumps({"id": 1, "problem": "p", "answer": answer}) + "\n")
    with pytest.raises(ValueError, match=rf"amc23\.jsonl:1: {match}"):
        load_benchmark("amc23", f)


# --------------------------------------------------------------------------- config files Snakemake reads


@pytest.mark.e2e  # Snakemake dry run
def test_snakemake_configfile_that_is_not_utf8_names_file_and_offset(repo, tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"seed: 0\nscale: caf\xe9\n")
    out = snakemake(repo / "Snakefile", tmp_path / "wd", "all", "--cores", "1", "-n", "--configfile", str(bad))
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"{bad}, line 2: byte 0xe9 is not UTF-8 (byte offset 18); save the file as UTF-8" in log, log[-2000:]
    assert "UnicodeDecodeError" not in log and "Traceback" not in log


# --------------------------------------------------------------------------- the start policy


def test_missing_start_policy_names_the_path_and_the_rule(repo, tmp_path):
    from sparserl.core.paths import Paths
    from sparserl.engines.local.trainer import Trainer
    from sparserl.methods.run import resolve_run
    cfg = load_config([repo / "configs/tiny.yaml"], {"results_dir": str(tmp_path / "results")})
    path = Paths(cfg).policy("s")
    with pytest.raises(ConfigError, match=rf"{path}: the start policy 's' \(rl\.policy\) has no checkpoint "
                                          rf"there; build it first \(`snakemake --cores 2 {path}`, rule "
                                          r"pretrain_policy\)"):
        Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))


# --------------------------------------------------------------------------- a policy's weights


@pytest.fixture(scope="module")
def policy_dirs(tmp_path_factory, tiny_lm):
    """A pre-trained policy's folder (results/smoke/policies/s) and a wider model's weights."""
    import torch
    from sparserl.models.policies import build_model, save_hf
    model, tok = tiny_lm
    root = tmp_path_factory.mktemp("weights")
    good = root / "results" / "smoke" / "policies" / "s"
    save_hf(model, tok, good, {"policy": "s"})
    torch.manual_seed(1)
    wide = build_model({"hidden_size": 48, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 96},
                       tok, 24)
    save_hf(wide, tok, root / "wide", {"policy": "wide"})
    return good, root / "wide" / "model.safetensors"


def _load_qwen3(path):
    from sparserl.models.qwen3 import Qwen3LM
    Qwen3LM.from_dir(path)


def _load_cpu_engine(path):
    from sparserl.rollout.cpu_engine import CPUEngine
    CPUEngine(path)


def _load_hf(path):
    from sparserl.engines.local.trainer import load_policy
    load_policy(str(path), "hf")


def _load_hf_backend(path):
    from sparserl.rollout.hf import HFBackend
    HFBackend(path)


def _damage(how, ckpt, wide):
    f = ckpt / "model.safetensors"
    if how == "truncated":
        with open(f, "r+b") as fh:
            fh.truncate(f.stat().st_size // 2)
    elif how == "not safetensors":
        f.write_text("not weights\n")
    else:  # another model's file: valid safetensors, other shapes
        shutil.copyfile(wide, f)


@pytest.mark.parametrize("load", [_load_qwen3, _load_cpu_engine, _load_hf, _load_hf_backend])
@pytest.mark.parametrize("how, cause", [
    ("truncated", r"truncated or not a safetensors file \(incomplete metadata, file not fully covered\)"),
    ("not safetensors", r"truncated or not a safetensors file \(header too large\)"),
    ("foreign", r"weights of another model \(.*model\.embed_tokens\.weight is \[\d+, 48\], config\.json says "
                r"\[\d+, 32\].*\), not the one .*/config\.json describes"),
])
def test_a_damaged_policy_checkpoint_names_the_file_and_how_to_rebuild_it(policy_dirs, tmp_path, load, how,
                                                                         cause):
    import re
    from sparserl.core.weights import WeightsError
    good, wide = policy_dirs
    ckpt = tmp_path / "results" / "smoke" / "policies" / "s"
    shutil.copytree(good, ckpt)
    load(ckpt)  # the whole checkpoint loads
    _damage(how, ckpt, wide)
    with pytest.raises(WeightsError) as e:
        load(ckpt)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.fullmatch(rf"{ckpt}/model\.safetensors: {cause}; delete the folder and pre-train it again "
                        rf"\(rule pretrain_policy\): `rm -r {ckpt} && snakemake --cores 2 {ckpt}`", msg), msg


@pytest.mark.e2e  # a job in a fresh process
def test_a_truncated_policy_stops_a_job_in_one_line(repo, policy_dirs, tmp_path):
    """Through the command line: exit 1, one line with the file and the fix, no traceback."""
    cfg = str(repo / "configs/smoke.yaml")
    run = lambda *a: subprocess.run([sys.executable, "-m", "sparserl", *a, "--config", cfg],  # noqa: E731
                                    capture_output=True, text=True, cwd=tmp_path, timeout=300)
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    P = Paths(load_config(cfg))  # relative to the job's folder, as the DAG passes them
    bench = [str(P.benchmark(b)) for b in P.benchmark_names()]
    assert run("make-tasks", "--pool", str(P.train_pool()), "--corpus", str(P.pretrain_corpus()),
               "--benchmarks", *bench).returncode == 0
    ckpt = tmp_path / "results" / "smoke" / "policies" / "s"
    shutil.copytree(policy_dirs[0], ckpt)
    _damage("truncated", ckpt, None)
    out = run("evaluate", "--policy", "s", "--policy-dir", str(P.policy("s")), "--benchmarks", *bench,
              "--out", str(P.eval_table("s")), "--curve", str(P.pass_at_k_curve("s")))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "SafetensorError" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and errors[0].endswith(
        "ERROR sparserl.cli: results/smoke/policies/s/model.safetensors: truncated or not a safetensors "
        "file (incomplete metadata, file not fully covered); delete the folder and pre-train it again (rule "
        "pretrain_policy): `rm -r results/smoke/policies/s && snakemake --cores 2 results/smoke/policies/s`"), errors


@pytest.mark.parametrize("where, fix", [
    ("models/Qwen/Qwen3-4B", "delete the folder and fetch it again on a machine with internet (rule "
                             "fetch_models): `rm -r models/Qwen/Qwen3-4B && snakemake --cores 2 fetch_models`"),
    ("results/tiny/rl/grpo_g4/seed0/checkpoints/step00030",
     "delete the run and train it again (rule rl_train): `rm -r results/tiny/rl/grpo_g4/seed0 && snakemake "
     "--cores 2 rl/grpo_g4`"),
    ("results/paper/rl/grpo_g4/seed1/openrlhf/ckpt/global_step30_hf",
     "delete the run and train it again (rule rl_train): `rm -r results/paper/rl/grpo_g4/seed1 && snakemake "
     "--cores 2 rl/grpo_g4`"),
    ("results/tiny/rl/grpo_g4/seed0/final", "delete the folder and rerun the rule that makes it: `rm -r "
                                            "results/tiny/rl/grpo_g4/seed0/final && snakemake --cores 2 "
                                            "results/tiny/rl/grpo_g4/seed0/final`"),
    ("results/tiny/critique/runs/x/final", "delete the folder and rerun the rule that makes it: `rm -r "
                                           "results/tiny/critique/runs/x/final && snakemake --cores 2 "
                                           "results/tiny/critique/runs/x/final`"),
])
def test_the_fix_for_damaged_weights_names_the_rule_that_makes_the_folder(where, fix):
    from sparserl.core.weights import rebuild_hint
    assert rebuild_hint(where) == fix
