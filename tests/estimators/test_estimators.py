"""Hand-computed tests for sparserl.estimators (one or more per registered estimator) and edge cases."""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparserl.estimators as E
from sparserl.estimators import EstimatorContext, get_baseline, get_estimator

R = np.array([1, 0, 0, 1, 1], dtype=float)
IDS = np.array(["a", "a", "a", "b", "b"])
REQUIRED = {"grpo", "dr_grpo", "rloo", "vanilla", "reinforce_pp", "gpg", "v05_fusion", "v05_prior_only",
            "v05_empirical_only", "basis_unb", "basis_vop", "basis_rvg"}


def adv(name, r=R, ids=IDS, **kw):
    return get_estimator(name)(r, ids, **kw)


# --------------------------------------------------------------------------- registry

def test_registry_names_and_baselines():
    assert REQUIRED <= set(E.list_estimators())
    for name in REQUIRED:
        assert callable(get_baseline(name))
    with pytest.raises(ValueError, match="unknown estimator"):
        get_estimator("nope")


def test_register_custom_and_duplicate():
    @E.register_estimator("_test_const")
    def const(rewards, prompt_ids, *, ctx=None, info=None, **kw):
        return np.zeros(len(rewards))

    assert get_estimator("_test_const") is const
    with pytest.raises(ValueError, match="already registered"):
        E.register_estimator("_test_const")(lambda *a, **k: None)
    del E.ESTIMATOR_REGISTRY["_test_const"]


# --------------------------------------------------------------------------- discovery

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _python(code: str, *path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, SRC])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_every_module_of_the_package_is_discovered():
    """A module nobody imports (estimators/__init__.py names no `median`) registers at the first lookup."""
    out = _python("import sys, sparserl.estimators as E\n"
                  "before = 'sparserl.estimators.median' in sys.modules\n"
                  "print(before, 'grpo_median' in E.list_estimators(), 'sparserl.estimators.median' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


def _plugin(site: Path, module: str, body: str) -> None:
    """A third-party package with an entry point in group sparserl.estimators, on `site`."""
    (site / f"{module}.py").write_text(body)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[sparserl.estimators]\nmine = {module}\n")


def test_entry_points_add_estimators(tmp_path):
    _plugin(tmp_path, "my_estimators", "import numpy as np\n"
            "from sparserl.estimators import register_estimator\n"
            "@register_estimator('third_party_zero')\n"
            "def zero(rewards, prompt_ids, **_):\n    return np.zeros(len(rewards))\n")
    out = _python("from sparserl.estimators import get_estimator, list_estimators\n"
                  "print('third_party_zero' in list_estimators(), get_estimator('third_party_zero')([1.0, 0.0], [0, 0]).tolist())",
                  str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "[0.0,", "0.0]"]


def test_a_broken_entry_point_is_named(tmp_path):
    _plugin(tmp_path, "broken_estimators", "raise RuntimeError('no such thing')\n")
    out = _python("from sparserl.estimators import list_estimators\nlist_estimators()", str(tmp_path))
    assert out.returncode != 0
    assert ("estimator entry point 'mine' = 'broken_estimators' (group 'sparserl.estimators', package "
            "broken_estimators) failed to load: RuntimeError: no such thing") in out.stderr


def test_estimator_paper_comes_from_the_defining_module():
    from sparserl.estimators.registry import estimator_paper
    assert [estimator_paper(n) for n in ("grpo", "v05_fusion", "basis_unb", "tether", "grpo_median")] == \
        ["baselines", "v05", "basis", "le_critique", "baselines"]


# --------------------------------------------------------------------------- group estimators

def test_grpo_hand():
    # group a: mean 1/3, std (ddof=1) = sqrt(1/3); group b all equal -> 0
    s = math.sqrt(1 / 3) + 1e-6
    np.testing.assert_allclose(adv("grpo"), [(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, 0, 0])
    np.testing.assert_allclose(get_baseline("grpo")(R, IDS), [1 / 3] * 3 + [1, 1])


def test_dr_grpo_hand():
    np.testing.assert_allclose(adv("dr_grpo"), [2 / 3, -1 / 3, -1 / 3, 0, 0])


def test_rloo_hand():
    np.testing.assert_allclose(adv("rloo"), [1, -0.5, -0.5, 0, 0])
    np.testing.assert_allclose(get_baseline("rloo")(R, IDS), [0, 0.5, 0.5, 1, 1])


def test_vanilla_hand():
    np.testing.assert_array_equal(adv("vanilla"), R)
    np.testing.assert_array_equal(get_baseline("vanilla")(R, IDS), 0)


def test_reinforce_pp_hand():
    a = R - 0.6  # batch mean 3/5
    np.testing.assert_allclose(adv("reinforce_pp"), a / (math.sqrt(0.24) + 1e-6))
    np.testing.assert_allclose(get_baseline("reinforce_pp")(R, IDS), 0.6)


def test_gpg_hand():
    info = {}
    # B = 2 prompts, only "a" is not all-equal -> scale 2
    np.testing.assert_allclose(adv("gpg", info=info), [4 / 3, -2 / 3, -2 / 3, 0, 0])
    assert info["gpg_scale"] == 2.0
    assert E.gpg_valid_scale(R, IDS) == 2.0
    assert E.gpg_valid_scale([1, 1, 0, 0], [0, 0, 1, 1]) == 1.0  # no valid prompt -> 1
    assert E.gpg_valid_scale([1, 0, 1], [0, 0, 1]) == 2.0  # a singleton is all-equal


def test_group_size_one_and_unequal_sizes():
    r = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    ids = np.array([7, 3, 3, 9, 9, 9])
    np.testing.assert_allclose(adv("grpo", r, ids)[0], 0.0)  # b = r for a singleton
    np.testing.assert_allclose(adv("rloo", r, ids), [1, -1, 1, -0.5, -0.5, 1])  # singleton: b = 0
    np.testing.assert_allclose(adv("dr_grpo", r, ids), [0, -0.5, 0.5, -1 / 3, -1 / 3, 2 / 3])


def test_all_equal_groups_give_zero():
    r, ids = np.ones(8), np.repeat([0, 1], 4)
    for name in ("grpo", "dr_grpo", "rloo", "gpg"):
        np.testing.assert_array_equal(adv(name, r, ids), 0.0)
    np.testing.assert_array_equal(adv("reinforce_pp", r, ids), 0.0)


def test_empty_batch():
    for name in ("grpo", "dr_grpo", "rloo", "vanilla", "reinforce_pp", "gpg"):
        assert adv(name, np.zeros(0), np.zeros(0, int)).shape == (0,)


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_nan_inf_rejected(name):
    ctx = EstimatorContext(prior={"a": 0.5, "b": 0.5}, phat={"a": 0.5, "b": 0.5})
    bad = R.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="rewards contains NaN at index 3"):
        adv(name, bad, ctx=ctx)
    bad[3] = np.inf
    with pytest.raises(ValueError, match="rewards contains inf at index 3"):
        adv(name, bad, ctx=ctx)
    with pytest.raises(ValueError, match="length mismatch"):
        adv(name, R, IDS[:4], ctx=ctx)


def test_side_data_validation():
    with pytest.raises(ValueError, match="ctx.prior is required"):
        adv("v05_fusion")
    with pytest.raises(ValueError, match="no entry for prompt id 'b'"):
        adv("v05_fusion", ctx=EstimatorContext(prior={"a": 0.5}))
    with pytest.raises(ValueError, match=r"ctx.prior contains NaN at index 1"):
        adv("v05_fusion", ctx=EstimatorContext(prior={"a": 0.5, "b": np.nan}))
    with pytest.raises(ValueError, match="differs between rollouts"):
        adv("v05_fusion", ctx=EstimatorContext(prior=np.array([0.5, 0.5, 0.4, 0.1, 0.1])))
    with pytest.raises(ValueError, match=r"ctx.prior must lie in \[0.0, 1.0\]"):
        adv("v05_fusion", ctx=EstimatorContext(prior={"a": 1.5, "b": 0.5}))
    # rollout-aligned arrays are accepted
    a1 = adv("v05_fusion", ctx=EstimatorContext(prior=np.array([0.5, 0.5, 0.5, 0.9, 0.9])))
    a2 = adv("v05_fusion", ctx=EstimatorContext(prior={"a": 0.5, "b": 0.9}))
    np.testing.assert_array_equal(a1, a2)
    with pytest.raises(ValueError, match="vhat contains NaN at index 0"):
        E.basis_refine([np.nan, 0.5], [1, 0])
    with pytest.raises(ValueError, match="length mismatch: vhat has length 2, rewards has length 3"):
        E.basis_refine([0.5, 0.5], [1, 0, 1])
    with pytest.raises(ValueError, match="returns contains inf"):
        E.tether_rho([np.inf], [0.0], [0.0])


# --------------------------------------------------------------------------- V0.5

def test_shrinkage_fusion_hand():
    mu, w, d2 = E.shrinkage_fusion([1.0, -1 / 3, 0.5], [2, 3, 4], [-1.0, 0.0, 0.5])
    np.testing.assert_allclose(d2, [3.5, 0.0, 0.0])
    np.testing.assert_allclose(w, [0.875, 0.0, 0.0])
    np.testing.assert_allclose(mu, [0.75, 0.0, 0.5])
    with pytest.raises(ValueError, match="k must be >= 1"):
        E.shrinkage_fusion(0.0, 0, 0.0)


def test_v05_fusion_hand():
    # a: vbar = -1/3, k = 3, V = 0 -> delta2 = 0, mu = 0.  b: vbar = 1, k = 2, V = -1 -> mu = 0.75
    info = {}
    a = adv("v05_fusion", ctx=EstimatorContext(prior={"a": 0.5, "b": 0.0}), info=info)
    sb = math.sqrt(1 - 0.75**2)
    np.testing.assert_allclose(a, [1, -1, -1, 0.25 / sb, 0.25 / sb])
    np.testing.assert_allclose(info["w"], [0.0, 0.875])
    np.testing.assert_allclose(get_baseline("v05_fusion")(R, IDS, ctx=EstimatorContext(prior={"a": 0.5, "b": 0.0})),
                               [0.5] * 3 + [0.875] * 2)


def test_v05_prior_only_hand():
    a = adv("v05_prior_only", ctx=EstimatorContext(prior={"a": 0.25, "b": 0.0}))
    # mu_a = -0.5, sigma = sqrt(0.75); mu_b = -1 -> sigma floored at sqrt(1e-6)
    s = math.sqrt(0.75)
    np.testing.assert_allclose(a, [1.5 / s, -0.5 / s, -0.5 / s, 2 / 1e-3, 2 / 1e-3])


def test_v05_empirical_only_hand():
    a = adv("v05_empirical_only", ctx=EstimatorContext(prior={"a": 0.9, "b": 0.1}))
    s = math.sqrt(8 / 9)
    np.testing.assert_allclose(a, [(4 / 3) / s, (-2 / 3) / s, (-2 / 3) / s, 0, 0])  # mu_b = 1: guarded, A = 0


def test_v05_mu_pm_one_guarded():
    for p, r in ((1.0, [1.0, 1.0]), (0.0, [0.0, 0.0])):
        a = adv("v05_fusion", np.array(r), np.array([0, 0]), ctx=EstimatorContext(prior={0: p}))
        np.testing.assert_array_equal(a, 0.0)
        assert np.isfinite(a).all()


# --------------------------------------------------------------------------- OSLA

def test_osla_target_and_continue():
    with np.errstate(all="raise"):
        t = E.osla_target(np.array([0.0, 0.1, 1.0]), 0.0039)
    assert t[0] == -np.inf
    np.testing.assert_allclose(t[1:], [1 / math.sqrt(0.0039) - 10, 1 / math.sqrt(0.0039) - 1])
    assert E.osla_k_max(0.0039) == 16
    cont = E.osla_should_continue(np.array([0.0, 0.0, 0.1, 0.1, 1.0, 1.0]), np.array([2, 4, 4, 6, 14, 16]),
                                  c=0.0039, k_min=4, k_max=16)
    # delta2 = 0: only k < k_min continues; target 6.01: 4 and 6 continue; target 15.01: 14 yes, 16 = k_max no
    np.testing.assert_array_equal(cont, [True, False, True, True, True, False])
    np.testing.assert_allclose(E.osla_risk(0.5, 4, 0.01), 0.5 / 3 + 0.04)


def test_osla_round():
    # prompt 0: prior right (delta2 = 0) -> stop; prompt 1: prior far off -> more; prompt 2 at k_max
    rnd = E.osla_round([4, 4, 16, 4], [0.0, 1.0, 1.0, 0.5], [0.0, -1.0, -1.0, 0.5], c=0.0039, k_min=4)
    np.testing.assert_array_equal(rnd.want_more, [False, True, False, False])
    np.testing.assert_array_equal(rnd.n_new, [0, 2, 0, 0])
    assert rnd.frac_wanting == 0.25 and not rnd.global_stop
    rnd = E.osla_round([4, 4, 16, 4, 4], [0.0, 1.0, 1.0, 0.5, 0.5], [0.0, -1.0, -1.0, 0.5, 0.5])
    assert rnd.frac_wanting == 0.2 and rnd.global_stop
    assert E.osla_round([15], [1.0], [-1.0]).n_new.tolist() == [1]  # capped at k_max
    assert E.pad_to_multiple(33) == 64 and E.pad_to_multiple(32) == 32 and E.pad_to_multiple(0) == 0


# --------------------------------------------------------------------------- BASIS

VH = np.array([0.5, 0.5, 0.8, 1.0, 0.0])
RB = np.array([1.0, 0.0, 1.0, 1.0, 0.0])


def test_basis_value():
    assert E.basis_value(0.3, np.inf) == 0.3
    np.testing.assert_allclose(E.basis_value(0.5, 1.0), math.e / (math.e + 1))
    np.testing.assert_array_equal(E.basis_value([0.0, 1e-9, 0.5, 1.0], 0.0), [0, 1, 1, 1])
    np.testing.assert_array_equal(E.basis_value([0.0, 1e-9, 0.5], 1e-4), [0, 1, 1])  # no overflow
    with np.errstate(all="raise"):
        E.basis_value(np.linspace(0, 1, 11), np.array([0.0, 1e-300, 0.1, 10.0, np.inf])[:, None])


def test_basis_refine_hand():
    # active set {0,1,2}; r/(1-v) = [2,0,5], v/(1-v) = [1,1,4]; inactive prompts get 0
    np.testing.assert_allclose(E.basis_refine(VH, RB, kind="unb"), [0.5, 0.7, 0.8, 0, 0])
    np.testing.assert_allclose(E.basis_refine(VH, RB, kind="vop"), [5 / 12, 7 / 12, 0.8 * 2 / 3, 0, 0])
    np.testing.assert_allclose(E.basis_refine(VH, RB, kind="rvg"), [0.5 / 1.3, 1 / 1.3, 0.8, 0, 0])
    np.testing.assert_allclose(E.basis_refine(VH, RB, inactive="vhat")[3:], [1.0, 0.0])
    np.testing.assert_allclose(E.basis_refine(VH, RB, inactive="formula")[3:], [7 / 6, 0.0])


@pytest.mark.parametrize("kind", ["unb", "vop", "rvg"])
def test_basis_registered_hand(kind):
    info = {}
    ctx = EstimatorContext(vhat=VH)
    a = adv(f"basis_{kind}", RB, np.arange(5), ctx=ctx, info=info)
    np.testing.assert_allclose(a, RB - E.basis_refine(VH, RB, kind=kind))
    assert info["active_size"] == 3 and info["beta"] is None


def test_basis_unb_registered_numbers():
    a = adv("basis_unb", RB, np.arange(5), ctx=EstimatorContext(vhat=VH))
    np.testing.assert_allclose(a, [0.5, -0.7, 0.2, 1.0, 0.0])


def test_basis_empty_active_set():
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(E.basis_refine([0.0, 1.0, 1.0], [0, 1, 1]), 0.0)
        np.testing.assert_array_equal(E.basis_refine([0.5, 1.0], [1, 1]), 0.0)  # |J \ {i}| = 0
        assert E.basis_refine([], []).shape == (0,)
        for kind in ("unb", "vop", "rvg"):
            np.testing.assert_array_equal(E.basis_refine([0.0, 1.0], [0, 1], kind=kind, inactive="formula"), 0.0)


def test_basis_beta_and_calibration():
    phat = np.array([0.1, 0.3, 0.5, 0.7])
    r = np.array([0.0, 1.0, 1.0, 1.0])
    ids = np.arange(4)
    # fixed beta = inf: vhat = phat
    a = adv("basis_unb", r, ids, ctx=EstimatorContext(phat=phat, beta=np.inf))
    np.testing.assert_allclose(a, r - E.basis_refine(phat, r))
    # calibration on the current batch picks the loss-minimising grid entry
    grid = np.array([0.1, 1.0, np.inf])
    info = {}
    adv("basis_unb", r, ids, ctx=EstimatorContext(phat=phat, beta_grid=grid), info=info)
    losses = [np.sum((r - E.basis_refine(E.basis_value(phat, b), r)) ** 2) for b in grid]
    assert info["beta"] == grid[int(np.argmin(losses))]
    np.testing.assert_allclose(info["losses"], losses)
    # previous-batch variant: inf without a previous batch, else calibrated on it
    info = {}
    adv("basis_unb", r, ids, ctx=EstimatorContext(phat=phat, calibrate_on="previous"), info=info)
    assert info["beta"] == np.inf
    ctx = EstimatorContext(phat=phat, beta_grid=grid, calibrate_on="previous", prev_phat=phat, prev_rewards=r)
    adv("basis_unb", np.zeros(4), ids, ctx=ctx, info=info)
    assert info["beta"] == grid[int(np.argmin(losses))]


def test_preceding_batch_calibrator():
    rng = np.random.default_rng(0)
    cal = E.PrecedingBatchCalibrator(beta_grid=[0.5, np.inf])
    p1, r1 = rng.uniform(0.05, 0.95, 64), rng.integers(0, 2, 64).astype(float)
    assert cal.step(p1, r1) == np.inf
    assert cal.step(p1, r1) == E.basis_calibrate(p1, r1, [0.5, np.inf])[0]


def test_basis_calibration_recovers_beta():
    # rewards drawn from V*_beta0 with beta0 in the grid: calibration should land on beta0
    rng = np.random.default_rng(1)
    phat = rng.uniform(0.02, 0.6, 20000)
    beta0 = 0.5
    r = (rng.random(20000) < E.basis_value(phat, beta0)).astype(float)
    beta, _ = E.basis_calibrate(phat, r, [0.1, 0.5, 2.0, np.inf])
    assert beta == beta0


# --------------------------------------------------------------------------- Tether / EVPO / GAE

def test_tether_rho_hand():
    R_ = np.array([1.0, 0.0, 1.0])
    b = np.array([0.5, 0.5, 0.0])
    V = np.array([1.0, 0.0, 0.5])
    # a = [.5,-.5,1], d = [.5,-.5,.5]: sum(ad) = 1, sum(d^2) = .75 -> 4/3 clipped to 1
    assert E.tether_rho(R_, b, V) == 1.0
    # b = 1/2: a = [.5,-.5,.5], d = [1,-1,0] -> 1/2
    assert E.tether_rho(R_, np.full(3, 0.5), np.array([1.5, -0.5, 0.5])) == pytest.approx(0.5)
    assert E.tether_rho(R_, b, b) == 0.0  # d == 0
    assert E.tether_rho(R_, b, 1 - V) == 0.0  # negative -> clipped to 0
    # per-sequence returns broadcast over tokens, masked padding ignored
    Rs, bs = np.array([[1.0], [0.0]]), np.array([[0.5], [0.5]])
    Vt = np.array([[0.9, 0.7, 123.0], [0.2, 0.4, 0.3]])
    mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    a, d = (Rs - bs)[:, [0, 0, 0]][mask], (Vt - bs)[mask]
    assert E.tether_rho(Rs, bs, Vt, mask) == pytest.approx(np.clip(a @ d / (d @ d), 0, 1))


def test_tether_bucketed_ema_baseline():
    rng = np.random.default_rng(2)
    Rs = rng.integers(0, 2, (8, 1)).astype(float)
    b = rng.uniform(0, 1, (8, 1))
    V = rng.uniform(0, 1, (8, 6))
    buckets = E.token_buckets(np.arange(6), [2, 4])[None, :].repeat(8, 0)
    np.testing.assert_array_equal(buckets[0], [0, 0, 1, 1, 2, 2])
    rho = E.tether_rho_bucketed(Rs, b, V, buckets, 3)
    for m in range(3):
        assert rho[m] == pytest.approx(E.tether_rho(Rs, b, V, buckets == m))
    np.testing.assert_allclose(E.tether_rho_update(0.0, 0.6), 0.03)
    np.testing.assert_allclose(E.tether_rho_update(np.array([0.5, 1.0]), np.array([1.0, 0.0]), 0.9), [0.55, 0.9])
    np.testing.assert_allclose(E.tether_baseline(0.5, np.array([1.0, 0.0]), 0.25), [0.625, 0.375])
    np.testing.assert_allclose(E.tether_baseline(0.5, np.array([1.0, 0.0]), np.array([0.0, 1.0]), [1, 1]), [1.0, 0.0])


def test_explained_variance_and_evpo():
    R_ = np.array([1.0, 0.0, 1.0, 0.0])
    assert E.explained_variance(R_, R_) == 1.0
    assert E.explained_variance(R_, np.full(4, 0.5)) == 0.0
    assert E.explained_variance(R_, 1 - R_) == pytest.approx(-3.0)
    assert math.isnan(E.explained_variance(np.ones(3), np.zeros(3)))
    assert E.evpo_use_critic(0.1) and not E.evpo_use_critic(-0.1) and not E.evpo_use_critic(float("nan"))
    np.testing.assert_array_equal(E.evpo_baseline([0.9, 0.1], 0.5, 0.2), [0.9, 0.1])
    np.testing.assert_array_equal(E.evpo_baseline([0.9, 0.1], 0.5, -0.2), [0.5, 0.5])


def test_gae_terminal_reward_gamma_lambda_one():
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    V = np.array([[0.2, 0.4, 0.6, 9.0], [0.5, 0.1, 9.0, 9.0]])
    Rs = np.array([1.0, 0.0])
    adv_, ret = E.gae(E.terminal_rewards(Rs, mask), V, mask)
    np.testing.assert_allclose(adv_, np.where(mask, Rs[:, None] - V, 0.0))
    np.testing.assert_allclose(ret, np.where(mask, Rs[:, None], 0.0))


def test_gae_hand_discounted():
    r = np.array([0.0, 0.0, 1.0])
    V = np.array([0.5, 0.6, 0.7])
    g, l = 0.9, 0.5
    d = [0 + g * 0.6 - 0.5, 0 + g * 0.7 - 0.6, 1 - 0.7]
    expect = [d[0] + g * l * d[1] + (g * l) ** 2 * d[2], d[1] + g * l * d[2], d[2]]
    adv_, ret = E.gae(r, V, gamma=g, lam=l)
    np.testing.assert_allclose(adv_, expect)
    np.testing.assert_allclose(ret, np.array(expect) + V)


# --------------------------------------------------------------------------- budget

def test_budget_utility_hand():
    np.testing.assert_allclose(E.budget_utility([0, 1, 2, 4], [0.5, 0.5, 0.5, 0.25]),
                               [0, 0, 0.5, 4 * 0.75 * (1 - 0.75**3)])
    np.testing.assert_array_equal(E.budget_utility(8, [0.0, 1.0]), [0.0, 0.0])  # all fail / all pass
    with np.errstate(all="raise"):
        E.budget_utility(np.arange(5)[:, None], np.linspace(0, 1, 5))


def test_allocate_budget_dp_matches_brute_force_and_greedy_is_feasible():
    import itertools
    p = np.array([0.1, 0.5, 0.9])
    best = max(itertools.product(range(7), repeat=3),
               key=lambda b: (sum(E.budget_utility(bi, pi) for bi, pi in zip(b, p)) if sum(b) <= 10 else -1))
    dp = E.allocate_budget(p, 10, b_max=6, method="dp")
    u = lambda b: float(np.sum(E.budget_utility(b, p)))  # noqa: E731
    assert dp.sum() <= 10 and u(dp) == pytest.approx(u(np.array(best)))
    gr = E.allocate_budget(p, 10, b_max=6)
    assert gr.sum() <= 10 and gr.max() <= 6 and u(gr) <= u(dp) + 1e-12
    assert E.allocate_budget(p, 6, b_min=2).tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="below n \\* b_min"):
        E.allocate_budget(p, 5, b_min=2)


@pytest.mark.parametrize("rewards", [[1, 0, 0, 1, 1, 0, 1, 1], [1, 0.5, 0, 1, 1, 0, 0.25, 1]])
def test_basis_calibration_with_groups_matches_per_rollout(rewards):
    """G > 1 (each rollout its own source): the grouped calibration equals the per-rollout one."""
    r = np.array(rewards, dtype=float)
    ids = np.array([5, 5, 2, 2, 9, 9, 9, 4])
    phat = {5: 0.25, 2: 0.5, 9: 0.25, 4: 0.75}
    grid = [0.2, 1.0, np.inf]
    info = {}
    a = adv("basis_unb", r, ids, ctx=EstimatorContext(phat=phat, beta_grid=grid), info=info)
    p_roll = np.array([phat[i] for i in ids])
    beta, losses = E.basis_calibrate(p_roll, r, grid)
    assert info["beta"] == beta
    np.testing.assert_allclose(info["losses"], losses)
    np.testing.assert_allclose(a, r - E.basis_refine(E.basis_value(p_roll, beta), r))


def test_basis_empty_batch():
    info = {}
    a = adv("basis_unb", np.zeros(0), np.zeros(0, int), ctx=EstimatorContext(phat={}), info=info)
    assert a.shape == (0,) and info["active_size"] == 0


def test_basis_grouped_path_equals_per_rollout_refine():
    """basis_baseline refines on (prompt, reward) pairs weighted by counts; it must equal
    basis_refine on the rollouts themselves, also with vhat next to the active-set edge."""
    from sparserl.estimators import EstimatorContext, basis_refine, get_baseline
    rng = np.random.default_rng(0)
    for _ in range(100):
        P, G = int(rng.integers(2, 30)), int(rng.integers(1, 6))
        ids = np.repeat(np.arange(P), G)
        phat = rng.choice([0.0, 1.0, 1 - 1e-7, 0.5, 0.9999, 1e-3, 0.3], P)
        r = rng.integers(0, 2, P * G).astype(float)
        for kind in ("unb", "vop", "rvg"):
            for inactive in ("zero", "vhat", "formula"):
                ctx = EstimatorContext(phat=dict(enumerate(phat)), beta=np.inf)
                got = get_baseline(f"basis_{kind}")(r, ids, ctx=ctx, inactive=inactive)
                want = basis_refine(phat[ids], r, 1e-6, kind, inactive)
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- integer group codes


def test_group_by_integer_codes_equals_np_unique():
    rng = np.random.default_rng(3)
    for ids in (rng.integers(0, 50, 400), np.array([7, 7, 3, 9, 3]), np.array([0]),
                rng.integers(0, 10**6, 30)):  # sparse codes take the sorting path
        g = E.group_by(ids)
        keys, inv = np.unique(ids, return_inverse=True)
        assert np.array_equal(g.keys, keys) and np.array_equal(g.inverse, inv.reshape(-1))
        assert np.array_equal(g.counts, np.bincount(inv.reshape(-1)))


@pytest.mark.parametrize("method", ["grpo_g8", "rloo_g8", "gpg_g8", "dapo_g16", "reinforce_pp_g1",
                                    "basis_grid_grpo_g1_basis", "v05_k4", "v05_osla"])
def test_trainer_advantages_with_codes_equal_string_ids(method):
    """The trainers group by integer codes; the advantages must be those of the prompt ids."""
    from sparserl.methods.sidedata import SideData, advantages
    from sparserl.methods.spec import load_method
    rng = np.random.default_rng(0)
    m = load_method(method)
    codes = np.repeat(rng.permutation(40), rng.integers(1, 9, 40))
    names = np.array([f"pool-{c:05d}" for c in codes], dtype=object)
    r = (rng.random(len(codes)) < 0.5).astype(np.float64)
    p = rng.uniform(0.05, 0.95, 40)[codes]
    side = SideData(prior=p if "prior" in m.needs else None, phat=p if "reference" in m.needs else None)
    a = advantages(m, r, codes, side, None)
    b = advantages(m, r, names, side, None)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
