"""The matched-prompts protocol and confound keys: a method's `prompts_per_step` (matched prompts
per step, rollouts grow with the group size) and OSLA's `osla.max_rollouts_per_step` (a cap on a
step's rollouts), in the spec, the local trainer, `run_osla` and the OpenRLHF flags."""
import copy

import numpy as np
import pandas as pd
import pytest

import sparserl.methods.spec as spec_mod
from sparserl.core.config import ConfigError
from sparserl.core.paths import Paths
from sparserl.methods.osla_sampler import run_osla
from sparserl.methods.spec import MethodSpec, load_method, prompts_per_step, run_owners
from helpers.rl_worlds import rl_world
from helpers.openrlhf_stubs import openrlhf_run

LOSS = "loss: {type: ppo_clip, clip_low: 0.2, clip_high: 0.2, agg: seq_mean_token_mean}\n"
ORACLE = "prior: {kind: oracle, pseudo_count: 0.5}\n"


@pytest.fixture()
def methods(tmp_path, monkeypatch):
    """A methods folder of our own: `write(name, text)` adds a method file the trainer loads."""
    d = tmp_path / "methods"
    d.mkdir()
    monkeypatch.setattr(spec_mod, "METHODS_DIR", d)

    def write(name, text):
        (d / f"{name}.yaml").write_text(text)
        return name
    return write


@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    """A tiny world (tests/helpers/rl_worlds.py): 16 rollouts a step, 2 steps."""
    return rl_world(tmp_path, tiny_lm, repo, steps=2, max_new_tokens=4, eval_fractions=())


# --------------------------------------------------------------------------- the spec


def test_shipped_matched_prompt_methods_share_64_prompts():
    mp = ["grpo_g4_mp", "grpo_g8_mp", "grpo_g16_mp", "vanilla_g1_mp", "reinforce_pp_g1_mp",
          "basis_grid_grpo_g1_basis_mp", "v05_osla_mp", "v05_k4_mp"]
    for n in mp:
        m = load_method(n)
        assert prompts_per_step(m, 256) == prompts_per_step(m, 512) == 64, n
        base = load_method(n[:-3]).to_dict()  # the same method on the matched-rollouts protocol
        assert {**m.to_dict(), "name": None} == {**base, "name": None, "prompts_per_step": 64}, n
    # at small's 256 rollouts, G=4 on 64 prompts is the rollouts protocol's step too
    assert prompts_per_step(load_method("grpo_g4"), 256) == 64
    m = load_method("v05_osla_matched")
    assert (m.prompts_per_step, m.osla.max_rollouts_per_step, m.osla.pad_multiple) == (40, 256, None)
    assert load_method("basis_grid_grpo_g1_basis_full").steps_factor == 1.0
    assert {**load_method("basis_grid_grpo_g1_basis_full").to_dict(), "name": None} == \
        {**load_method("basis_grid_grpo_g1_basis").to_dict(), "name": None, "steps_factor": 1.0}


def test_new_keys_are_part_of_a_methods_identity_and_absent_keys_keep_old_hashes(methods, world, repo):
    from sparserl.methods.run import resolve_run
    shipped = repo / "configs" / "methods"
    assert "prompts_per_step" not in load_method("grpo_g4", shipped).to_dict()
    assert "max_rollouts_per_step" not in load_method("v05_osla", shipped).to_dict()["osla"]
    methods("g2", "estimator: grpo\ngroup_size: 2\n" + LOSS)
    k0 = resolve_run(world, "g2", 0).key
    methods("g2", "estimator: grpo\ngroup_size: 2\nprompts_per_step: 8\n" + LOSS)  # 16 / 2: same batch
    k1 = resolve_run(world, "g2", 0).key
    methods("g2", "estimator: grpo\ngroup_size: 2\nprompts_per_step: 5\n" + LOSS)
    assert len({k0, k1, resolve_run(world, "g2", 0).key}) == 3  # the run reruns when the key changes
    m = load_method("g2")
    assert MethodSpec.from_dict(m.to_dict()) == m and m.to_dict()["prompts_per_step"] == 5
    methods("o", "estimator: v05_fusion\ngroup_size: 2\nprompts_per_step: 3\n"
                 "osla: {k_init: 2, max_rollouts_per_step: 9}\n" + ORACLE + LOSS)
    o = load_method("o")
    assert MethodSpec.from_dict(o.to_dict()) == o and o.to_dict()["osla"]["max_rollouts_per_step"] == 9


def test_run_owners_dedupe_positive_only_onto_vanilla_not_the_mp_arms():
    owners = run_owners(["vanilla_g1", "positive_only_g1", "negative_only_g1", "vanilla_g1_mp",
                         "grpo_g4", "grpo_g4_mp"])
    assert owners["positive_only_g1"] == "vanilla_g1"  # the same spec: one run, two names
    assert owners["negative_only_g1"] == "negative_only_g1"
    assert owners["vanilla_g1_mp"] == "vanilla_g1_mp" and owners["grpo_g4_mp"] == "grpo_g4_mp"
    # at 256 rollouts a step, 64 prompts of G=4 is the matched-rollouts run: one run, two names;
    # G=8 and G=1 at 64 prompts are runs of their own
    owners = run_owners(["grpo_g4", "grpo_g4_mp", "grpo_g8", "grpo_g8_mp", "vanilla_g1",
                         "vanilla_g1_mp", "v05_osla", "v05_osla_mp"], 256)
    assert owners["grpo_g4_mp"] == "grpo_g4" and owners["v05_osla_mp"] == "v05_osla"
    assert owners["grpo_g8_mp"] == "grpo_g8_mp" and owners["vanilla_g1_mp"] == "vanilla_g1_mp"
    assert run_owners(["grpo_g4", "grpo_g4_mp"], 128)["grpo_g4_mp"] == "grpo_g4_mp"


@pytest.mark.parametrize("value, message", [
    ("0", r"key 'prompts_per_step': 0 is less than the minimum of 1"),
    ("-4", r"key 'prompts_per_step': -4 is less than the minimum of 1"),
    ("2.5", r"key 'prompts_per_step': 2.5 is not of type 'integer'"),
    ("many", r"key 'prompts_per_step': 'many' is not of type 'integer'"),
    ("true", r"key 'prompts_per_step': True is not of type 'integer'"),
])
def test_bad_prompts_per_step_names_the_file_the_key_and_the_fix(methods, value, message):
    methods("bad", f"estimator: grpo\ngroup_size: 4\nprompts_per_step: {value}\n" + LOSS)
    with pytest.raises(ConfigError, match=r"bad\.yaml: " + message + ".*fix it in that file"):
        load_method("bad")


def test_osla_cap_below_round_0_is_a_config_error(methods):
    methods("cap", "estimator: v05_fusion\ngroup_size: 4\nprompts_per_step: 10\n"
                   "osla: {k_init: 4, max_rollouts_per_step: 39}\n" + ORACLE + LOSS)
    with pytest.raises(ConfigError, match=r"cap\.yaml: key 'osla.max_rollouts_per_step': 39 is below round 0's "
                                          r"40 rollouts \(10 prompt\(s\) x k_init 4\); raise it to at least 40"):
        load_method("cap")
    methods("pad", "estimator: v05_fusion\ngroup_size: 4\nprompts_per_step: 9\n"
                   "osla: {k_init: 4, pad_multiple: 32, max_rollouts_per_step: 63}\n" + ORACLE + LOSS)
    with pytest.raises(ConfigError, match=r"below round 0's 64 rollouts.*padded to osla.pad_multiple"):
        load_method("pad")
    methods("osla0", "estimator: v05_fusion\ngroup_size: 4\nosla: {k_init: 4, max_rollouts_per_step: 0}\n"
                     + ORACLE + LOSS)
    with pytest.raises(ConfigError, match=r"osla0\.yaml: key 'osla.max_rollouts_per_step': 0 is less than"):
        load_method("osla0")
    # without prompts_per_step the prompts come from the scale: checked where the scale is known
    methods("scale", "estimator: v05_fusion\ngroup_size: 4\nosla: {k_init: 4, max_rollouts_per_step: 256}\n"
                     + ORACLE + LOSS)
    m = load_method("scale")
    assert prompts_per_step(m, 256) == 64
    with pytest.raises(ConfigError, match=r"scale\.yaml \(with rl.rollouts_per_step = 512\): key "
                                          r"'osla.max_rollouts_per_step': 256 is below round 0's 512"):
        prompts_per_step(m, 512)


def test_prompts_per_step_skips_the_whole_groups_rule():
    m = MethodSpec.from_dict({"name": "t", "estimator": "grpo", "group_size": 8, "loss": {"type": "ppo_clip"},
                              "prompts_per_step": 3})
    assert prompts_per_step(m, 12) == 3  # 12 is no multiple of 8: only the rollouts protocol cares
    with pytest.raises(ConfigError, match="not a multiple of the group_size 8"):
        prompts_per_step(MethodSpec.from_dict({**m.to_dict(), "prompts_per_step": None}), 12)


# --------------------------------------------------------------------------- the local trainer


@pytest.mark.parametrize("G", [1, 4])
def test_prompts_per_step_fixes_prompts_and_rollouts_grow_with_the_group(world, methods, G):
    from sparserl.engines.local.trainer import train
    mp = methods(f"mp{G}", f"estimator: grpo\ngroup_size: {G}\nprompts_per_step: 3\n" + LOSS)
    plain = methods(f"plain{G}", f"estimator: grpo\ngroup_size: {G}\n" + LOSS)
    met = pd.read_parquet(train(world, mp, 0) / "metrics.parquet")
    assert len(met) == 2 and (met["prompts"] == 3).all() and (met["rollouts_trained"] == 3 * G).all()
    assert list(met["rollouts_total"]) == [3 * G, 6 * G]
    rolls = pd.read_parquet(Paths(world).run(mp, 0).rollouts)
    assert rolls.groupby("step")["prompt_id"].nunique().tolist() == [3, 3]
    assert rolls.groupby("step").size().tolist() == [3 * G, 3 * G]
    met = pd.read_parquet(train(world, plain, 0) / "metrics.parquet")  # the rollouts protocol: 16 / G
    assert (met["prompts"] == 16 // G).all() and (met["rollouts_trained"] == 16).all()


def _osla_step(world, name):
    from sparserl.engines.local.trainer import Trainer
    from sparserl.methods.run import resolve_run
    from sparserl.grading.verifier import open_verifier
    t = Trainer(world, resolve_run(world, name, 0))
    with open_verifier(world) as t._ver:
        info = {}
        s = t.sampler.sample(info)
    return s, info


def test_osla_with_prompts_per_step_keeps_the_prompts_and_the_cap_holds(world, methods):
    # a constant prior far from this policy's pass rate: OSLA wants more rollouts on every prompt
    osla = "osla: {k_init: 2, k_step: 2, c: 0.0039, k_max: 16, global_stop: 0.25%s}\n"
    prior = "prior: {kind: constant, p: 0.999}\n"
    methods("free", "estimator: v05_fusion\ngroup_size: 2\nprompts_per_step: 5\n" + osla % "" + prior + LOSS)
    methods("capped", "estimator: v05_fusion\ngroup_size: 2\nprompts_per_step: 5\n"
                      + osla % ", max_rollouts_per_step: 15" + prior + LOSS)
    s, info = _osla_step(world, "free")
    k = np.bincount(s.batch.prompt_index, minlength=len(s.idx))
    assert len(s.idx) == 5 and k.sum() > 15 and "osla_stop_budget" not in info  # uncapped: columns as before
    s, info = _osla_step(world, "capped")
    k = np.bincount(s.batch.prompt_index, minlength=len(s.idx))
    assert len(s.idx) == 5 and (k >= 2).all()
    assert info["rollouts_generated"] == len(s.batch) == k.sum() == 15  # the cap, exactly
    assert info["osla_stop_budget"] > 0
    assert sum(info[f"osla_stop_{r}"] for r in ("test", "target", "k_max", "global", "budget")) == pytest.approx(1)


# --------------------------------------------------------------------------- run_osla's cap


def _bernoulli(p_true, seed=0):
    rng = np.random.default_rng(seed)

    def sample(idx, counts):
        return [(rng.random(int(n)) < p_true[int(i)]).astype(float) for i, n in zip(idx, counts)]
    return sample


def test_run_osla_cap_holds_the_budget_and_serves_the_largest_need_first():
    B = 12
    p_true = np.full(B, 0.1)
    prior = np.full(B, 0.99)  # far from the truth: every prompt wants more
    free = run_osla(_bernoulli(p_true), prior, k_init=4, global_stop=0.0)
    assert free.total_rollouts > 64
    res = run_osla(_bernoulli(p_true), prior, k_init=4, global_stop=0.0, max_rollouts=64)
    assert res.total_rollouts == 64 and (res.k >= 4).all()
    assert (res.stop_reason == "budget").any()
    assert sum(r["rollouts"] for r in res.rounds) == 64
    # nothing past the cap: a cap at round 0 leaves every wanting prompt at k_init
    res0 = run_osla(_bernoulli(p_true), prior, k_init=4, global_stop=0.0, max_rollouts=48)
    assert (res0.k == 4).all() and (res0.stop_reason == "budget").all() and res0.n_rounds == 1
    # one round of room for two prompts: the two furthest below their target k draw
    sample = _bernoulli(np.array([0.1, 0.1, 0.1]))
    scripted = iter([[np.array([1.0, 1, 1, 1]), np.array([0.0, 0, 0, 0]), np.array([1.0, 0, 0, 0])]])

    def first_then_random(idx, counts):
        return next(scripted, None) or sample(idx, counts)
    res = run_osla(first_then_random, np.array([0.9, 0.9, 0.9]), k_init=4, k_step=2, global_stop=0.0,
                   max_rollouts=14)
    # prompt 0 agrees with its prior (test stop); prompt 1 (all wrong) is further below its target
    # k than prompt 2 (1 of 4 right), so it alone draws the 2 left
    assert res.k.tolist() == [4, 6, 4] and res.total_rollouts == 14
    assert res.stop_reason.tolist() == ["test", "budget", "budget"]


def test_run_osla_cap_counts_padded_dispatches():
    B = 5
    prior = np.full(B, 0.99)
    res = run_osla(_bernoulli(np.full(B, 0.1)), prior, k_init=2, global_stop=0.0, pad_multiple=8, max_rollouts=30)
    assert res.dispatched_rollouts <= 30 and res.total_rollouts <= 30
    assert res.dispatched_rollouts == 24  # round 0: 10 -> 16; then room for 8 requested (8 dispatched)
    with pytest.raises(ValueError, match="max_rollouts 15 is below round 0's 16 rollouts"):
        run_osla(_bernoulli(np.full(B, 0.1)), prior, k_init=2, pad_multiple=8, max_rollouts=15)


# --------------------------------------------------------------------------- the OpenRLHF flags


def test_openrlhf_flags_take_the_methods_prompts_per_step(tmp_path):
    from sparserl.engines.openrlhf.flags import openrlhf_flags
    cfg = {"scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
           "tasks": {"source": "hub", "chat_template": True, "prompt_template": "{problem}\n\n{instruction}"},
           "policies": {"qwen3_4b": {"source": "hub", "hf_name": "Qwen/Qwen3-4B-Instruct-2507"}},
           "rollout": {"backend": "vllm", "max_new_tokens": 8192, "vllm": {"max_model_len": 10240}},
           "rl": {"policy": "qwen3_4b", "methods": ["grpo_g16_mp"], "seeds": [0], "steps": 10,
                  "rollouts_per_step": 512, "lr": 1e-6, "temperature": 1.0, "mini_batches": 2}}
    for name, G in (("grpo_g16_mp", 16), ("vanilla_g1_mp", 1)):
        f = openrlhf_flags(copy.deepcopy(cfg), load_method(name), 0, openrlhf_run(tmp_path / "final"), policy_path="p")
        assert (f["rollout.batch_size"], f["rollout.n_samples_per_prompt"]) == (64, G)
        assert f["train.batch_size"] == 64 * G // 2 and f["data.max_samples"] == 10 * 64
    f = openrlhf_flags(copy.deepcopy(cfg), load_method("grpo_g16"), 0, openrlhf_run(tmp_path / "final"), policy_path="p")
    assert f["rollout.batch_size"] == 32  # the rollouts protocol: 512 / 16


def test_rollouts_note_names_the_matched_prompts_budget():
    from sparserl.engines.report import rollouts_note
    # grpo_g8_mp: 64 prompts x 8 = 512 rollouts a step against rl.rollouts_per_step = 256
    note = rollouts_note(10, 10, 256, 5120, 5120, None, "grpo_g8_mp")
    assert note == "matched prompts: 64 prompts x group size 8 a step instead of 256 rollouts"
    # grpo_g4_mp at 256: the fixed budget, nothing to explain
    assert rollouts_note(10, 10, 256, 2560, 2560, None, "grpo_g4_mp") == "the fixed budget: 256 rollouts per step"
    # without the method the old reading: 512 a step looks like adaptive group sizes
    assert "adaptive group sizes" in rollouts_note(10, 10, 256, 5120, 5120)
