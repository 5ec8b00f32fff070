"""The estimator registry (specs, side data, levels) and the token-level estimators (GAE, Tether,
token-bucketed Tether, EVPO), with hand-computed numbers where the formula allows."""
import dataclasses

import numpy as np
import pytest

import sparserl.estimators as E
from sparserl.estimators import EstimatorContext, get_estimator, get_spec, list_estimators
from sparserl.estimators import batchwise, group, shrinkage

NEEDS = {
    "grpo": set(), "dr_grpo": set(), "rloo": set(), "vanilla": set(), "reinforce_pp": set(), "gpg": set(),
    "v05_fusion": {"prior"}, "v05_prior_only": {"prior"}, "v05_empirical_only": {"prior"},
    "basis_unb": {"reference", "beta", "calibration"}, "basis_vop": {"reference", "beta", "calibration"},
    "basis_rvg": {"reference", "beta", "calibration"},
    "gae": {"values"}, "evpo": {"values"},
    "tether": {"values", "calibration"}, "tether_bucketed": {"values", "calibration"},
}
TOKEN = {"gae", "tether", "tether_bucketed", "evpo"}
# the functions the former _BUILTIN table registered: the same code paths must stay registered
FUNCTIONS = {
    "grpo": (group.grpo_advantage, group.grpo_baseline),
    "dr_grpo": (group.dr_grpo_advantage, group.grpo_baseline),
    "rloo": (group.rloo_advantage, group.rloo_baseline),
    "vanilla": (group.vanilla_advantage, group.vanilla_baseline),
    "reinforce_pp": (group.reinforce_pp_advantage, group.reinforce_pp_baseline),
    "gpg": (group.gpg_advantage, group.grpo_baseline),
    "v05_fusion": (shrinkage.v05_advantage, shrinkage.v05_baseline),
    "v05_prior_only": (shrinkage.v05_prior_only_advantage, shrinkage.v05_prior_only_baseline),
    "v05_empirical_only": (shrinkage.v05_empirical_only_advantage, shrinkage.v05_empirical_only_baseline),
    "basis_unb": (batchwise.basis_unb_advantage, batchwise.basis_unb_baseline),
    "basis_vop": (batchwise.basis_vop_advantage, batchwise.basis_vop_baseline),
    "basis_rvg": (batchwise.basis_rvg_advantage, batchwise.basis_rvg_baseline),
}

# one group of three rollouts, T = 2; row 1 has one real token
R3 = np.array([1.0, 0.0, 0.0])
IDS3 = np.array([7, 7, 7])
MASK3 = np.array([[True, True], [True, False], [True, True]])
V3 = np.array([[0.1, 0.2], [0.0, np.nan], [1.0, 0.9]])  # NaN on padding is ignored
# b^LOO = [0, .5, .5], a = R - b^LOO = [1, -.5, -.5]; d = V - b^LOO on real tokens:
# row0 [.1, .2], row1 [-.5], row2 [.5, .4]  ->  sum(a d) = .1, sum(d^2) = .71, rhohat = 10/71
RHOHAT3 = 10 / 71


def tok(name, r=R3, ids=IDS3, values=V3, mask=MASK3, **kw):
    return get_estimator(name)(r, ids, values=values, mask=mask, **kw)


def random_batch(seed=0, n_prompts=6, T=7):
    rng = np.random.default_rng(seed)
    ids = np.repeat(np.arange(n_prompts), rng.integers(1, 5, n_prompts))  # sizes 1..4
    r = (rng.random(len(ids)) < 0.5).astype(float)
    mask = np.arange(T) < rng.integers(0, T + 1, len(ids))[:, None]  # empty rows too
    return r, ids, rng.random((len(ids), T)), mask


# --------------------------------------------------------------------------- registry


def test_every_name_has_a_valid_spec():
    # the names come from the registry (a new estimator module adds one); NEEDS and TOKEN pin the
    # papers' estimators, which must stay registered with these needs
    names = list_estimators(level=None)
    assert set(NEEDS) <= set(names)
    for name in names:
        spec = get_spec(name)
        assert spec.name == name and spec.fn is get_estimator(name) is E.ESTIMATOR_REGISTRY[name]
        assert isinstance(spec.needs, frozenset) and spec.needs <= set(E.SIDE_DATA), name
        assert spec.needs == NEEDS.get(name, spec.needs), name
        assert spec.level in E.LEVELS and (name not in TOKEN or spec.level == "token"), name
        assert name in TOKEN or name not in NEEDS or spec.level == "sequence", name
        assert spec.level != "token" or "values" in spec.needs
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_spec("grpo").level = "token"


def test_registration_moved_to_the_same_functions():
    for name, (adv, base) in FUNCTIONS.items():
        assert get_spec(name).fn is adv and get_spec(name).baseline is base is E.get_baseline(name), name
    for name in TOKEN:
        assert get_spec(name).baseline is None and name not in E.BASELINE_REGISTRY


def test_list_estimators_levels():
    names = list_estimators(None)
    by_level = {lv: sorted(n for n in names if get_spec(n).level == lv) for lv in E.LEVELS}
    assert list_estimators() == list_estimators("sequence") == by_level["sequence"]
    assert list_estimators("token") == by_level["token"]
    assert names == sorted(by_level["sequence"] + by_level["token"])
    assert set(FUNCTIONS) <= set(by_level["sequence"]) and TOKEN <= set(by_level["token"])
    with pytest.raises(ValueError, match="level"):
        list_estimators("tokens")
    with pytest.raises(ValueError, match="unknown estimator 'nope'"):
        get_spec("nope")


def test_needs_are_truthful_for_sequence_estimators():
    """Estimators that need no per-prompt side data run without a ctx; prior/reference ones say what is missing."""
    r, ids = np.array([1.0, 0.0, 1.0]), np.array([0, 0, 1])
    for name in list_estimators("sequence"):
        needs = get_spec(name).needs
        if "prior" in needs:
            with pytest.raises(ValueError, match="ctx.prior is required"):
                get_estimator(name)(r, ids)
        elif "reference" in needs:
            with pytest.raises(ValueError, match="ctx.phat is required"):
                get_estimator(name)(r, ids)
        else:
            assert np.isfinite(get_estimator(name)(r, ids)).all(), name


def test_token_estimators_require_values_and_mask():
    for name in TOKEN:
        with pytest.raises(TypeError, match="values"):
            get_estimator(name)(R3, IDS3, mask=MASK3)


def test_decorator_rejects_bad_declarations():
    def f(rewards, prompt_ids, **_):
        return np.zeros(len(rewards))

    with pytest.raises(ValueError, match=r"unknown side data \['priors'\]"):
        E.register_estimator("_t_bad", needs=("priors",))
    with pytest.raises(ValueError, match="tuple of names"):
        E.register_estimator("_t_bad", needs="prior")
    with pytest.raises(ValueError, match="level must be one of"):
        E.register_estimator("_t_bad", level="batch")
    with pytest.raises(ValueError, match="must declare needs=\\('values'"):
        E.register_estimator("_t_bad", level="token")
    assert "_t_bad" not in E.ESTIMATOR_REGISTRY


def test_decorator_double_registration_and_unregistering():
    def f(rewards, prompt_ids, **_):
        return np.zeros(len(rewards))

    def b(rewards, prompt_ids, **_):
        return np.ones(len(rewards))

    try:
        g = E.register_estimator("_t_dup", baseline=b, needs=("prior",))(f)
        assert g.__wrapped__ is f and get_estimator("_t_dup") is g  # f behind the output check
        assert E.register_estimator("_t_dup", baseline=b, needs=("prior",))(f) is g  # a re-import, no-op
        with pytest.raises(ValueError, match="already registered to"):
            E.register_estimator("_t_dup", baseline=b, needs=("prior",))(lambda *a, **k: None)
        with pytest.raises(ValueError, match="already registered with a different spec"):
            E.register_estimator("_t_dup", baseline=b, needs=("reference",))(f)
        with pytest.raises(ValueError, match="already registered"):
            E.register_estimator("grpo")(f)
        assert get_spec("_t_dup").needs == {"prior"} and "_t_dup" in list_estimators()
        del E.BASELINE_REGISTRY["_t_dup"]  # drops the baseline only
        assert get_spec("_t_dup").baseline is None and get_estimator("_t_dup") is g
        with pytest.raises(ValueError, match="no baseline registered"):
            E.get_baseline("_t_dup")
    finally:
        del E.ESTIMATOR_REGISTRY["_t_dup"]
    assert "_t_dup" not in list_estimators(None) and "_t_dup" not in E.BASELINE_REGISTRY
    with pytest.raises(ValueError, match="unknown estimator"):
        get_spec("_t_dup")
    with pytest.raises(KeyError):
        del E.ESTIMATOR_REGISTRY["_t_dup"]


# --------------------------------------------------------------------------- GAE


def test_gae_lambda_one_is_return_minus_value():
    r, ids, v, m = random_batch(1)
    v_pad = np.where(m, v, np.nan)  # padding values are never read
    info = {}
    a = tok("gae", r, ids, v_pad, m, info=info)
    assert a.shape == m.shape
    np.testing.assert_allclose(a, np.where(m, r[:, None] - v, 0.0), atol=1e-12)
    np.testing.assert_allclose(info["returns"], np.where(m, r[:, None], 0.0), atol=1e-12)


def test_gae_hand_lambda():
    # R = 1, V = [.5, .8]: delta_1 = 1 - .8 = .2, delta_0 = .8 - .5 = .3, A_0 = .3 + .5 * .2 = .4
    a = tok("gae", np.array([1.0]), np.array([0]), np.array([[0.5, 0.8, 9.0]]), np.array([[1, 1, 0]]), lam=0.5)
    np.testing.assert_allclose(a, [[0.4, 0.2, 0.0]])
    # gamma = .5, lam = 1: A_0 = (0 + .5 * .8 - .5) + .5 * .2 = 0.0
    a = tok("gae", np.array([1.0]), np.array([0]), np.array([[0.5, 0.8]]), np.ones((1, 2), bool), gamma=0.5)
    np.testing.assert_allclose(a, [[0.0, 0.2]], atol=1e-12)


# --------------------------------------------------------------------------- Tether


def test_tether_closed_form_hand():
    info = {}
    a = tok("tether", d_ema=0.0, ctx=EstimatorContext(tether_rho=0.0), info=info)
    rho = RHOHAT3
    assert info["tether_rho"] == pytest.approx(rho) and info["tether_rhohat"] == pytest.approx(rho)
    b_row1 = (1 - rho) * 0.5
    want = [[1 - rho * 0.1, 1 - rho * 0.2],
            [-b_row1, 0.0],
            [-(b_row1 + rho * 1.0), -(b_row1 + rho * 0.9)]]
    np.testing.assert_allclose(a, want, atol=1e-12)
    assert want[0][0] == pytest.approx(1 - 1 / 71) and want[2][1] == pytest.approx(-39.5 / 71)


def test_tether_rho_carried_through_ctx_follows_the_ema():
    info = {}
    tok("tether", ctx=EstimatorContext(tether_rho=0.4), info=info)  # d_ema = 0.95 by default
    assert info["tether_rho"] == pytest.approx(0.95 * 0.4 + 0.05 * RHOHAT3)
    tok("tether", info=info)  # no ctx: rho_0 = 0
    assert info["tether_rho"] == pytest.approx(0.05 * RHOHAT3)
    # three steps carrying info -> ctx give the EMA recursion
    ctx, rho, rng = EstimatorContext(), 0.0, np.random.default_rng(3)
    for _ in range(3):
        r, ids, v, m = random_batch(int(rng.integers(1000)))
        a = tok("tether", r, ids, v, m, ctx=ctx, info=info, d_ema=0.8)
        b_loo = E.rloo_baseline(r, ids)[:, None]
        rho = 0.8 * rho + 0.2 * E.tether_rho(r[:, None], b_loo, v, m)
        assert info["tether_rho"] == pytest.approx(rho)
        np.testing.assert_allclose(a, np.where(m, r[:, None] - ((1 - rho) * b_loo + rho * v), 0), atol=1e-12)
        ctx.tether_rho = info["tether_rho"]
    assert rho > 0


def test_tether_with_loo_values_is_rloo():
    r, ids, _v, m = random_batch(4)
    b_loo = E.rloo_baseline(r, ids)
    values = np.repeat(b_loo[:, None], m.shape[1], axis=1)
    info = {}
    a = tok("tether", r, ids, values, m, ctx=EstimatorContext(tether_rho=0.7), info=info)
    assert info["tether_rhohat"] == 0.0  # d = 0: no critic signal
    np.testing.assert_allclose(a, E.broadcast_sequence_advantages(E.rloo_advantage(r, ids), m), atol=1e-12)


def test_tether_bucketed_one_rho_per_bucket():
    r, ids, v, m = random_batch(5, T=6)
    m[0, :] = True  # every bucket has a token
    b_loo = E.rloo_baseline(r, ids)[:, None]
    info = {}
    a = tok("tether_bucketed", r, ids, v, m, edges=(2, 4), d_ema=0.5,
            ctx=EstimatorContext(tether_rho=np.array([0.2, 0.4, 0.6])), info=info)
    # each bucket's rhohat is Tether's fit on that bucket's columns alone
    hat = [E.tether_rho(r[:, None], b_loo, v[:, s], m[:, s]) for s in (slice(0, 2), slice(2, 4), slice(4, 6))]
    np.testing.assert_allclose(info["tether_rhohat"], hat, atol=1e-12)
    rho = 0.5 * np.array([0.2, 0.4, 0.6]) + 0.5 * np.array(hat)
    np.testing.assert_allclose(info["tether_rho"], rho, atol=1e-12)
    rho_t = np.repeat(rho, 2)[None, :]
    np.testing.assert_allclose(a, np.where(m, r[:, None] - ((1 - rho_t) * b_loo + rho_t * v), 0), atol=1e-12)


def test_tether_bucketed_edges_and_empty_buckets():
    info, info1 = {}, {}
    ctx = EstimatorContext(tether_rho=0.3)
    # no edges: one bucket, the same as tether
    a = tok("tether_bucketed", edges=(), ctx=ctx, info=info)
    np.testing.assert_allclose(a, tok("tether", ctx=ctx, info=info1), atol=1e-12)
    assert info["tether_rho"] == pytest.approx([info1["tether_rho"]])
    # T = 2 with the default edges: only the first bucket sees tokens; the others keep their rho
    prev = np.linspace(0.1, 0.6, len(E.DEFAULT_BUCKET_EDGES) + 1)
    tok("tether_bucketed", ctx=EstimatorContext(tether_rho=prev), info=info)
    np.testing.assert_allclose(info["tether_rho"][1:], prev[1:])
    assert info["tether_rho"][0] == pytest.approx(0.95 * 0.1 + 0.05 * RHOHAT3)


# --------------------------------------------------------------------------- EVPO


def test_evpo_switches_on_explained_variance():
    info = {}
    good = np.where(MASK3, R3[:, None] * 0.9 + 0.05, 0.0)  # EV close to 1: the critic
    a = tok("evpo", values=good, info=info)
    assert info["evpo_use_critic"] is True and info["explained_variance"] > 0
    np.testing.assert_allclose(a, np.where(MASK3, R3[:, None] - good, 0.0), atol=1e-12)
    bad = np.where(MASK3, 1.0 - R3[:, None], 0.0)  # anti-correlated: EV < 0, the group mean (1/3)
    a = tok("evpo", values=bad, info=info)
    assert info["evpo_use_critic"] is False and info["explained_variance"] < 0
    np.testing.assert_allclose(a, np.where(MASK3, R3[:, None] - 1 / 3, 0.0), atol=1e-12)
    a = tok("evpo", r=np.ones(3), values=good, info=info)  # Var(R) = 0: EV is NaN, the group mean
    assert info["evpo_use_critic"] is False and np.isnan(info["explained_variance"])
    np.testing.assert_array_equal(a, 0.0)


# --------------------------------------------------------------------------- shapes and errors


def test_broadcast_sequence_advantages():
    m = np.array([[1, 1, 0], [0, 1, 1]])  # any mask, left padding included
    np.testing.assert_array_equal(E.broadcast_sequence_advantages([2.0, -1.0], m), [[2, 2, 0], [0, -1, -1]])
    with pytest.raises(ValueError, match="mask must have one row per rollout"):
        E.broadcast_sequence_advantages([1.0, 2.0, 3.0], m)
    with pytest.raises(ValueError, match="adv must be 1-D"):
        E.broadcast_sequence_advantages([[1.0]], m)


@pytest.mark.parametrize("name", sorted(TOKEN))
def test_token_shapes_equivariance_and_empty(name):
    r, ids, v, m = random_batch(6)
    a = tok(name, r, ids, v, m)
    assert a.shape == m.shape and np.isfinite(a).all() and (a[~m] == 0).all()
    perm = np.random.default_rng(0).permutation(len(r))
    np.testing.assert_allclose(tok(name, r[perm], ids[perm], v[perm], m[perm]), a[perm], atol=1e-12)
    assert tok(name, np.zeros(0), np.zeros(0, int), np.zeros((0, 4)), np.zeros((0, 4), bool)).shape == (0, 4)


@pytest.mark.parametrize("name", sorted(TOKEN))
def test_token_input_errors_name_the_argument(name):
    cases = [
        (dict(values=V3[:, :1]), "values must have the shape of mask"),
        (dict(values=np.array([[0.1, np.inf], [0, 0], [0, 0]])), r"values contains inf at index \(0, 1\)"),
        (dict(mask=MASK3[:, 0]), r"mask must be 2-D"),
        (dict(mask=MASK3[:2]), "mask must have one row per rollout"),
        (dict(mask=np.array([[1, 1], [0, 1], [1, 1]])), "mask must be right-padded: row 1"),
        (dict(mask=np.array([[1, 2], [1, 0], [1, 1]])), "mask must be boolean"),
        (dict(r=R3[:, None]), "rewards must be 1-D"),
        (dict(ids=IDS3[:2]), "prompt_ids has length 2"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            tok(name, **kw)


def test_tether_option_errors():
    with pytest.raises(ValueError, match="d_ema"):
        tok("tether", d_ema=1.5)
    with pytest.raises(ValueError, match=r"ctx.tether_rho must lie in \[0.0, 1.0\]"):
        tok("tether", ctx=EstimatorContext(tether_rho=1.2))
    with pytest.raises(ValueError, match="ctx.tether_rho must be a scalar for tether"):
        tok("tether", ctx=EstimatorContext(tether_rho=np.zeros(3)))
    with pytest.raises(ValueError, match=r"one entry per bucket \(3\)"):
        tok("tether_bucketed", edges=(1, 2), ctx=EstimatorContext(tether_rho=np.zeros(2)))
    with pytest.raises(ValueError, match="edges must be strictly increasing"):
        tok("tether_bucketed", edges=(4, 2))
