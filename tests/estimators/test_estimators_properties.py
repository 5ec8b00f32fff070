"""Property tests: V0.5 guarantees by exact enumeration, BASIS unbiasedness / BLUE / O(B), Tether = lstsq."""
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparserl.estimators as E
from sparserl.estimators import EstimatorContext, get_estimator, list_estimators

KS = [1, 2, 4, 8, 16]


def binomial(k: int, p: float):
    """Outcomes j = 0..k successes with probabilities, and vbar in {-1,+1} units."""
    j = np.arange(k + 1)
    prob = np.array([math.comb(k, i) for i in j]) * p**j * (1 - p) ** (k - j)
    return (2 * j - k) / k, prob


# --------------------------------------------------------------------------- V0.5

@pytest.mark.parametrize("k", KS)
def test_v05_bias_bound_exact(k):
    """Theorem 3.4: |E[mu] - mu_true| <= 1/sqrt(k) for every mu_true and prior (exact enumeration)."""
    for mu_true in np.linspace(-1, 1, 41):
        vbar, prob = binomial(k, (mu_true + 1) / 2)
        for V in np.linspace(-1, 1, 21):
            mu, _w, _d = E.shrinkage_fusion(vbar, k, np.full_like(vbar, V))
            assert abs(prob @ mu - mu_true) <= 1 / math.sqrt(k) + 1e-12


@given(k=st.sampled_from(KS), mu_true=st.floats(-1, 1), V=st.floats(-1, 1))
def test_v05_bias_bound_hypothesis(k, mu_true, V):
    vbar, prob = binomial(k, (mu_true + 1) / 2)
    mu, _w, _d = E.shrinkage_fusion(vbar, k, V)
    assert abs(prob @ mu - mu_true) <= 1 / math.sqrt(k) + 1e-12


@given(k=st.sampled_from(KS), mu_true=st.floats(-1, 1), V=st.floats(-1, 1), w=st.floats(0, 1))
def test_v05_mse_decomposition_exact(k, mu_true, V, w):
    """Theorem 3.2: for a fixed w, MSE = w^2 sigma_noise^2 + (1-w)^2 Delta^2 (exact enumeration)."""
    vbar, prob = binomial(k, (mu_true + 1) / 2)
    mse = prob @ (w * vbar + (1 - w) * V - mu_true) ** 2
    sigma_noise2 = (1 - mu_true**2) / k  # Var of the mean of k rewards in {-1,+1}
    assert mse == pytest.approx(w**2 * sigma_noise2 + (1 - w) ** 2 * (V - mu_true) ** 2, abs=1e-12)


@given(vbar=st.floats(-1, 1), k=st.integers(1, 64), V=st.floats(-1, 1))
def test_v05_weight_properties(vbar, k, V):
    mu, w, d2 = E.shrinkage_fusion(vbar, k, V)
    assert 0 <= w < 1 and d2 >= 0
    assert min(vbar, V) - 1e-12 <= mu <= max(vbar, V) + 1e-12
    assert (d2 == 0) == ((vbar - V) ** 2 <= 1 / k)


# --------------------------------------------------------------------------- batches

@st.composite
def batches(draw, max_prompts=8, max_group=6):
    n = draw(st.integers(1, max_prompts))
    sizes = draw(st.lists(st.integers(1, max_group), min_size=n, max_size=n))
    ids = np.repeat(np.arange(n) * 7 + 3, sizes)
    r = np.array(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=len(ids), max_size=len(ids))))
    perm = np.array(draw(st.permutations(range(len(ids)))))
    prior = {int(i): draw(st.floats(0, 1)) for i in np.unique(ids)}
    phat = {int(i): draw(st.floats(0, 1)) for i in np.unique(ids)}
    return r[perm], ids[perm], EstimatorContext(prior=prior, phat=phat, beta_grid=[0.3, 3.0, np.inf])


@settings(max_examples=60, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_all_estimators_finite_and_permutation_equivariant(batch, rnd):
    r, ids, ctx = batch
    perm = np.array(rnd.sample(range(len(r)), len(r)))
    for name in list_estimators():
        a = get_estimator(name)(r, ids, ctx=ctx)
        assert a.shape == r.shape and np.isfinite(a).all(), name
        b = E.get_baseline(name)(r, ids, ctx=ctx)
        assert np.isfinite(b).all(), name
        ap = get_estimator(name)(r[perm], ids[perm], ctx=ctx)
        np.testing.assert_allclose(ap, a[perm], atol=1e-9, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_group_advantages_sum_to_zero(batch):
    r, ids, ctx = batch
    g = E.group_by(ids)
    for name in ("grpo", "dr_grpo", "rloo", "gpg"):
        sums = g.sum(get_estimator(name)(r, ids))
        if name == "rloo":  # a singleton has no other rollout: b = 0, A = r
            sums = sums[g.counts > 1]
        np.testing.assert_allclose(sums, 0, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(get_estimator("reinforce_pp")(r, ids).sum(), 0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_group_baselines_match_naive_loop(batch):
    r, ids, _ = batch
    grp, loo = np.empty_like(r), np.empty_like(r)
    for m in range(len(r)):
        same = ids == ids[m]
        grp[m] = r[same].mean()
        others = same.copy()
        others[m] = False
        loo[m] = r[others].mean() if others.any() else 0.0
    np.testing.assert_allclose(E.grpo_baseline(r, ids), grp)
    np.testing.assert_allclose(E.rloo_baseline(r, ids), loo)


# --------------------------------------------------------------------------- BASIS

def naive_refine(vhat, r, eps=1e-6, kind="unb"):
    """Direct double loop over the reconstructed BASIS refinements (Eq. 3 and the VOP/RVG weights,
    lost from the paper's text; inactive -> 0, empty J\\{i} -> 0)."""
    s2 = vhat * (1 - vhat)
    act = s2 > eps
    out = np.zeros(len(vhat))
    for i in range(len(vhat)):
        if not act[i]:
            continue
        J = [j for j in range(len(vhat)) if act[j] and j != i]
        if not J:
            continue
        if kind == "rvg":
            out[i] = vhat[i] * sum(r[j] for j in J) / sum(vhat[j] for j in J)
        else:
            num = sum(vhat[j] * r[j] / s2[j] for j in J)
            den = sum(vhat[j] ** 2 / s2[j] for j in J)
            out[i] = vhat[i] * num / (den + (kind == "vop"))
    return out


# Near the active-set edge 1/(1-vhat) ~ 1e6 dominates the batch sums (cancellation check).
values = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5, 1e-7, 1 - 1e-7, 1.01e-6, 1 - 1.01e-6]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(values, st.sampled_from([0.0, 1.0])), min_size=0, max_size=12),
       st.sampled_from(["unb", "vop", "rvg"]))
def test_basis_refine_equals_naive_loop(rows, kind):
    vhat = np.array([v for v, _ in rows], dtype=float)
    r = np.array([x for _, x in rows], dtype=float)
    with np.errstate(divide="raise", over="raise", invalid="raise"):  # underflow of subnormals is fine
        got = E.basis_refine(vhat, r, kind=kind)
    np.testing.assert_allclose(got, naive_refine(vhat, r, kind=kind), rtol=1e-9, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 0.99), min_size=2, max_size=10))
def test_basis_unb_unbiased_when_initial_estimates_exact(v):
    """vt is linear in r, so E[vt] = refine(vhat, E[r]) exactly; with vhat = V it equals V."""
    V = np.array(v)
    np.testing.assert_allclose(E.basis_refine(V, V, kind="unb"), V, rtol=1e-12)
    # linearity in r (the premise of the exact-expectation argument)
    r1, r2 = np.arange(len(V)) % 2.0, (np.arange(len(V)) + 1) % 3 / 2.0
    np.testing.assert_allclose(E.basis_refine(V, 0.3 * r1 + 0.7 * r2),
                               0.3 * E.basis_refine(V, r1) + 0.7 * E.basis_refine(V, r2), atol=1e-12)


def test_basis_unb_unbiased_monte_carlo():
    rng = np.random.default_rng(0)
    V = rng.uniform(0.05, 0.95, 16)
    r = (rng.random((200000, 16)) < V).astype(float)
    mean = np.mean([E.basis_refine(V, row) for row in r[:20000]], axis=0)
    assert np.abs(mean - V).max() < 0.02


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 0.99), min_size=2, max_size=10), st.data())
def test_basis_unb_equals_blue_solve(v, data):
    """Prop. 1: min sum_j w_ij^2 sigma_j^2 s.t. sum_j w_ij V_j = V_i, w_ii = 0 (KKT solve, B x B weights)."""
    V = np.array(v)
    B = len(V)
    r = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=B, max_size=B)))
    s2 = V * (1 - V)
    W = np.zeros((B, B))
    for i in range(B):
        J = [j for j in range(B) if j != i]
        n = len(J)
        K = np.zeros((n + 1, n + 1))
        K[:n, :n] = 2 * np.diag(s2[J])
        K[:n, n] = K[n, :n] = V[J]
        rhs = np.zeros(n + 1)
        rhs[n] = V[i]
        W[i, J] = np.linalg.solve(K, rhs)[:n]
    np.testing.assert_allclose(W @ V, V)  # unbiased
    np.testing.assert_allclose(E.basis_refine(V, r, kind="unb"), W @ r, rtol=1e-8, atol=1e-12)


def test_basis_refine_is_linear_memory():
    rng = np.random.default_rng(0)
    B = 200_000
    vhat, r = rng.uniform(0, 1, B), (rng.random(B) < 0.5).astype(float)
    tracemalloc.start()
    E.basis_refine(vhat, r)
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * B * 8  # about 6 O(B) temporaries; a B x B array would be 320 GB


def test_basis_value_limits():
    p = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(E.basis_value(p, np.inf), p)
    np.testing.assert_array_equal(E.basis_value(p, 1e-6), (p > 0).astype(float))
    v = E.basis_value(p, np.array([0.1, 1.0, 10.0])[:, None])
    assert (np.diff(v, axis=0) <= 1e-15).all()  # larger beta -> closer to phat (smaller)
    assert (v >= p - 1e-15).all()


# --------------------------------------------------------------------------- Tether

@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**31 - 1))
def test_tether_rho_equals_lstsq(n, seed):
    rng = np.random.default_rng(seed)
    R = rng.integers(0, 2, n).astype(float)
    b = rng.uniform(0, 1, n)
    V = rng.uniform(0, 1, n)
    a, d = R - b, V - b
    rho_ls = np.linalg.lstsq(d[:, None], a, rcond=None)[0][0]
    got = E.tether_rho(R, b, V)
    assert got == pytest.approx(min(max(rho_ls, 0.0), 1.0), abs=1e-10)


# --------------------------------------------------------------------------- budget

@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=4), st.integers(0, 20))
def test_budget_greedy_feasible_and_dp_optimal(p, total):
    import itertools
    p = np.array(p)
    u = lambda b: float(np.sum(E.budget_utility(b, p)))  # noqa: E731
    dp = E.allocate_budget(p, total, b_max=6, method="dp")
    gr = E.allocate_budget(p, total, b_max=6)
    best = max(u(np.array(b)) for b in itertools.product(range(7), repeat=len(p)) if sum(b) <= total)
    assert dp.sum() <= total and u(dp) == pytest.approx(best)
    assert gr.sum() <= total and gr.max(initial=0) <= 6 and u(gr) <= best + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0, 1e-7, 1 - 1.01e-6]),
                          st.sampled_from([0.0, 1.0, 0.25])), min_size=1, max_size=30),
       st.sampled_from(["unb", "vop", "rvg"]), st.sampled_from(["zero", "vhat", "formula"]))
def test_basis_calibrate_losses_equal_per_rollout_refine(rows, kind, inactive):
    """Calibration dedupes (phat, r) pairs; the losses must equal the plain per-rollout computation."""
    p = np.array([x for x, _ in rows])
    r = np.array([y for _, y in rows])
    grid = np.array([0.0, 0.05, 1.0, 20.0, np.inf])
    beta, losses = E.basis_calibrate(p, r, grid, kind=kind, inactive=inactive)
    direct = [np.sum((r - E.basis_refine(E.basis_value(p, b), r, kind=kind, inactive=inactive)) ** 2) for b in grid]
    np.testing.assert_allclose(losses, direct, rtol=1e-9, atol=1e-12)
    assert beta == grid[int(np.argmin(losses))]
