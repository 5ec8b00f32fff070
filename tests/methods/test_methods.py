"""The methods layer both engines call: typed specs, side data from declared needs, samplers."""
import numpy as np
import pytest

from sparserl.core.config import ConfigError
from sparserl.estimators import EstimatorContext, get_estimator, get_spec, gpg_valid_scale
from sparserl.methods.sampling import SAMPLERS, make_sampler
from sparserl.methods.sidedata import CalibrationState, MissingSideData, SideData, advantages
from sparserl.methods.spec import OSLA_C, MethodSpec, load_method, method_names


def _spec(**kw):
    return MethodSpec.from_dict({"name": "t", "group_size": 2, "loss": {"type": "ppo_clip"}, **kw})


def test_specs_roundtrip_and_fill_every_default_once():
    for n in method_names():
        m = load_method(n)
        assert MethodSpec.from_dict(m.to_dict()) == m
        assert m.needs == get_spec(m.estimator).needs
        assert m.sampler in SAMPLERS
        assert m.loss.clip_low is not None or m.loss.type == "gpg"
    o = _spec(estimator="v05_fusion", osla={"k_init": 2}, prior={"kind": "constant"}).osla
    assert (o.c, o.k_step, o.global_stop, o.k_max) == (OSLA_C, 2, 0.25, 16)


def test_spec_errors_name_the_method_and_the_fix(tmp_path):
    (tmp_path / "bad.yaml").write_text("estimator: v05_fusion\ngroup_size: 4\nloss: {type: ppo_clip}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*needs a 'prior'"):
        load_method("bad", tmp_path)
    (tmp_path / "beta.yaml").write_text("estimator: basis_unb\ngroup_size: 1\nloss: {type: ppo_clip}\n"
                                        "basis: {beta: sometimes}\n")
    with pytest.raises(ConfigError, match="basis.beta"):
        load_method("beta", tmp_path)
    (tmp_path / "kind.yaml").write_text("estimator: v05_fusion\ngroup_size: 4\nloss: {type: ppo_clip}\n"
                                        "prior: {kind: crystal_ball}\n")
    with pytest.raises(ConfigError, match="unknown prior 'crystal_ball'"):
        load_method("kind", tmp_path)


def test_side_data_follows_the_declared_needs():
    r = np.array([1.0, 0, 1, 1, 0, 0])
    ids = np.array(["a", "a", "b", "b", "c", "c"])
    m = _spec(estimator="v05_fusion", prior={"kind": "oracle"})
    with pytest.raises(MissingSideData, match="method t: estimator 'v05_fusion' needs a prior"):
        advantages(m, r, ids, SideData())
    prior = {"a": 0.2, "b": 0.7, "c": 0.5}
    np.testing.assert_array_equal(advantages(m, r, ids, SideData(prior=prior)),
                                  get_estimator("v05_fusion")(r, ids, ctx=EstimatorContext(prior=prior)))
    g = _spec(estimator="grpo", loss={"type": "gpg"})  # GPG loss, non-GPG estimator: B/B_valid folded in
    np.testing.assert_allclose(advantages(g, r, ids, SideData()),
                               get_estimator("grpo")(r, ids) * gpg_valid_scale(r, ids))


def test_basis_previous_batch_state_is_carried():
    m = _spec(estimator="basis_unb", group_size=1, basis={"calibrate_on": "previous", "beta": "calibrate"})
    state = CalibrationState()
    phat = {"a": 0.3, "b": 0.6, "c": 0.9}
    r1, r2, ids = np.array([1.0, 0, 1]), np.array([0.0, 1, 1]), np.array(["a", "b", "c"])
    advantages(m, r1, ids, SideData(phat=phat), state)
    np.testing.assert_array_equal(state.prev_basis[0], [0.3, 0.6, 0.9])
    got = advantages(m, r2, ids, SideData(phat=phat), state)
    ctx = EstimatorContext(phat=phat, calibrate_on="previous", prev_phat=np.array([0.3, 0.6, 0.9]),
                           prev_rewards=r1)
    np.testing.assert_array_equal(got, get_estimator("basis_unb")(r2, ids, ctx=ctx))


def test_a_token_level_estimator_runs_through_the_same_call():
    """Tether: per-token values and a mask in, per-token advantages out; its EMA rho is carried
    between steps by the calibration state, as BASIS's preceding batch is."""
    m = _spec(estimator="tether")
    rng = np.random.default_rng(0)
    r, ids = np.array([1.0, 0, 1, 1]), np.array(["a", "a", "b", "b"])
    mask = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], bool)
    values = rng.uniform(0, 1, mask.shape)
    with pytest.raises(MissingSideData, match="per-token values"):
        advantages(m, r, ids, SideData())
    state = CalibrationState()
    a1 = advantages(m, r, ids, SideData(values=values, mask=mask), state)
    assert a1.shape == mask.shape and np.all(a1[~mask] == 0)
    rho1 = state.extra["tether_rho"]
    assert 0 <= rho1 <= 1
    a2 = advantages(m, r, ids, SideData(values=values, mask=mask), state)
    want = get_estimator("tether")(r, ids, values=values, mask=mask, ctx=EstimatorContext(tether_rho=rho1))
    np.testing.assert_array_equal(a2, want)


def test_samplers_are_chosen_from_the_spec_not_the_name():
    assert make_sampler(load_method("dapo_g16"), generate=None, rng=None, pool_ids=np.arange(4), prompts=[],
                        n_prompts=1).name == "dynamic_sampling"
    assert make_sampler(load_method("v05_osla"), generate=None, rng=None, pool_ids=np.arange(4), prompts=[],
                        n_prompts=1).name == "osla"
    assert make_sampler(load_method("grpo_g16"), generate=None, rng=None, pool_ids=np.arange(4), prompts=[],
                        n_prompts=1).name == "plain"
