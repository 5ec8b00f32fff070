"""The OSLA allocation loop on scripted rewards: stops where V0.5's Theorem 3.6 says, k_max, global stop, padding."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparserl.estimators import osla_should_continue
from sparserl.methods.osla_sampler import cached_sample_fn, run_osla


def scripted(scripts):
    """sample_fn handing out each prompt's scripted rewards in order; logs every request."""
    pos = [0] * len(scripts)
    log = []

    def fn(idx, counts):
        log.append((np.asarray(idx).tolist(), np.asarray(counts).tolist()))
        out = []
        for i, n in zip(idx, counts):
            out.append(np.array(scripts[i][pos[i]:pos[i] + n]))
            pos[i] += n
        return out

    fn.log = log
    return fn


# Hand-computed with c = 0.0039 (1/sqrt(c) = 16.0128, k_max = 16), s = 2r - 1, V = 2p - 1:
#  A: p=.9 (V=.8), 3 of 4 succeed: vbar=.5, (.3)^2 = .09 < 1/4 -> Delta2 = 0 -> stop at 4 ('test').
#  B: p=.9, all fail: vbar=-1, Delta2 = 3.24 - 1/k, target = 16.01 - 1/Delta2 ~ 15.7 -> grows to 16,
#     where 16 >= 15.70 ('target').
#  C: p=.5 (V=0), 1111 then 00: k=4 vbar=1, Delta2=.75, target 14.68 -> more; k=6 vbar=1/3,
#     1/9 - 1/6 < 0 -> Delta2 = 0 -> stop at 6 ('test').
#  D: p=.6 (V=.2), 8 successes, a failure, then successes:
#     k=4  vbar=1:     Delta2 = .64 - .25  = .39   target 13.45 -> more
#     k=6  vbar=1:     .64 - 1/6 = .473            target 13.90 -> more
#     k=8  vbar=1:     .64 - .125 = .515           target 14.07 -> more
#     k=10 vbar=.8:    .36 - .1 = .26              target 12.17 -> more
#     k=12 vbar=.833:  .4011 - .0833 = .3178       target 12.87 -> more
#     k=14 vbar=.857:  .4318 - .0714 = .3604       target 13.24 -> stop at 14 ('target')
SCRIPTS = [[1, 1, 1, 0] + [1] * 12, [0] * 16, [1, 1, 1, 1, 0, 0] + [1] * 10,
           [1] * 8 + [0] + [1] * 7]
PRIORS = [0.9, 0.9, 0.5, 0.6]


def test_hand_computed_example():
    fn = scripted(SCRIPTS)
    res = run_osla(fn, PRIORS, k_init=4, k_step=2, c=0.0039, global_stop=0.25, pad_multiple=32)
    assert res.k.tolist() == [4, 16, 6, 14]
    assert res.stop_reason.tolist() == ["test", "target", "test", "target"]
    assert res.stop_round.tolist() == [0, 6, 1, 5]
    # round 0: everyone 4; round 1: B, C, D; rounds 2-5: B, D; round 6: B alone (1/4 is not < 25%)
    assert fn.log == [([0, 1, 2, 3], [4, 4, 4, 4]), ([1, 2, 3], [2, 2, 2])] + [([1, 3], [2, 2])] * 4 + [([1], [2])]
    assert [r["rollouts"] for r in res.rounds] == [16, 6, 4, 4, 4, 4, 2]
    assert res.total_rollouts == 40 == sum(len(r) for r in res.rewards)
    assert res.dispatched_rollouts == 7 * 32  # every round's dispatch padded to 32
    assert [r["frac_wanting"] for r in res.rounds] == [0.75, 0.5, 0.5, 0.5, 0.5, 0.25, 0.0]
    assert res.delta2_init[0] == 0 and res.delta2_init[1] > 0
    assert res.rewards[3].tolist() == SCRIPTS[3][:14]
    assert res.delta2[3] == pytest.approx((26 / 14 - 1 - 0.2) ** 2 - 1 / 14)


def test_k_max_caps_and_is_reported():
    res = run_osla(scripted(SCRIPTS), PRIORS, c=0.0039, k_max=8, global_stop=0.25)
    assert res.k.tolist() == [4, 8, 6, 8]
    assert res.stop_reason.tolist() == ["test", "k_max", "test", "k_max"]
    assert res.k_max == 8


def test_default_k_max_is_floor_inverse_sqrt_c():
    res = run_osla(scripted([[0] * 40]), [0.99], c=0.001, global_stop=0.0)
    assert res.k_max == 31 and res.k[0] == 31  # 4, 6, ..., 30, then min(2, 31 - 30) = 1
    assert [r["rollouts"] for r in res.rounds][-1] == 1


def test_global_stop_stops_the_whole_batch():
    # with a 50% global stop, D stops at 14 and B (alone = 25% < 50%) is stopped globally at 14
    res = run_osla(scripted(SCRIPTS), PRIORS, c=0.0039, global_stop=0.5)
    assert res.k.tolist() == [4, 14, 6, 14]
    assert res.stop_reason.tolist() == ["test", "global", "test", "target"]
    assert res.stop_round.tolist() == [0, 5, 1, 5]
    # 1 of 5 prompts wants more after round 0: 20% < 25% -> nobody draws again
    fn = scripted([[0] * 16] + [[1, 1, 1, 0]] * 4)
    res = run_osla(fn, [0.9, 0.9, 0.9, 0.9, 0.9], c=0.0039)
    assert res.k.tolist() == [4] * 5 and len(fn.log) == 1
    assert res.stop_reason.tolist() == ["global"] + ["test"] * 4


def test_padding_and_no_padding():
    res = run_osla(scripted([[1, 1, 1, 0]] * 3), [0.9] * 3, pad_multiple=32)
    assert res.total_rollouts == 12 and res.dispatched_rollouts == 32
    assert run_osla(scripted([[1, 1, 1, 0]] * 3), [0.9] * 3).dispatched_rollouts is None


def test_bad_sample_fn_and_inputs():
    with pytest.raises(ValueError, match="asked for 4"):
        run_osla(lambda idx, n: [np.ones(3) for _ in idx], [0.5])
    with pytest.raises(ValueError, match=r"\{0, 1\}"):
        run_osla(lambda idx, n: [np.full(k, 0.5) for k in n], [0.5])
    with pytest.raises(ValueError, match="reward arrays"):
        run_osla(lambda idx, n: [], [0.5])
    with pytest.raises(ValueError, match="prior_p"):
        run_osla(scripted([[1] * 4]), [1.5])
    assert run_osla(scripted([]), []).total_rollouts == 0


def test_cached_sample_fn_draws_without_replacement():
    rewards = [[0, 1, 0, 1, 1, 0, 1, 1], [1] * 8]
    fn = cached_sample_fn(rewards, 0)
    a = fn(np.array([0, 1]), np.array([5, 2]))
    b = fn(np.array([0]), np.array([3]))
    assert sorted(np.concatenate([a[0], b[0]]).tolist()) == sorted(rewards[0])
    assert fn.used.tolist() == [8, 2]
    with pytest.raises(ValueError, match="left"):
        fn(np.array([0]), np.array([1]))


@settings(max_examples=40, deadline=None)
@given(p_true=st.lists(st.floats(0, 1), min_size=1, max_size=24), seed=st.integers(0, 1000),
       c=st.sampled_from([0.01, 0.0039, 0.001]), stop=st.sampled_from([0.0, 0.25, 0.6]),
       offset=st.floats(-0.5, 0.5))
def test_loop_invariants(p_true, seed, c, stop, offset):
    rng = np.random.default_rng(seed)
    pools = [(rng.random(40) < p).astype(int) for p in p_true]
    prior = np.clip(np.asarray(p_true) + offset, 0, 1)
    res = run_osla(cached_sample_fn(pools, rng), prior, c=c, global_stop=stop, pad_multiple=32)
    kmax = int(np.floor(1 / np.sqrt(c)))
    assert ((res.k >= 4) & (res.k <= kmax)).all()
    assert (((res.k - 4) % 2 == 0) | (res.k == kmax)).all()
    assert res.total_rollouts == sum(r["rollouts"] for r in res.rounds) == sum(map(len, res.rewards))
    assert res.dispatched_rollouts % 32 == 0 and res.dispatched_rollouts >= res.total_rollouts
    assert set(res.stop_reason) <= {"test", "target", "k_max", "global"}
    # every prompt not stopped globally no longer wants more at its final k (the estimators' rule)
    vbar = np.array([2 * r.mean() - 1 for r in res.rewards])
    from sparserl.estimators import shrinkage_fusion
    _mu, _w, d2 = shrinkage_fusion(vbar, res.k, 2 * prior - 1)
    cont = osla_should_continue(d2, res.k, c, 4, kmax)
    assert not cont[res.stop_reason != "global"].any()
    assert cont[res.stop_reason == "global"].all()
    assert ((res.stop_reason == "test") == ((d2 == 0) & (res.stop_reason != "global"))).all()
