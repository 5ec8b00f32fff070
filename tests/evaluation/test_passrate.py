"""Pass rates read off the reference cache (one set of rollouts for both) and the cache's lengths."""
import json

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import write_table
from sparserl.core.paths import Paths


def _cfg(tmp_path, samples=4, reference_n=8):
    return {"scale": "unit", "seed": 0, "results_dir": str(tmp_path / "results"),
            "rollout": {"backend": "cpu", "max_new_tokens": 4},
            "passrate": {"samples": samples, "temperature": 1.0, "top_p": 1.0},
            "rl": {"policy": "s"}, "basis": {"reference_n": reference_n},
            "policies": {"s": {"source": "pretrain"}, "m": {"source": "pretrain"}}}


def _files(cfg, ref):
    """The paths rule passrate passes (workflow/rules/policies.smk)."""
    P = Paths(cfg)
    return dict(policy_dir=P.policy(ref), pool=P.train_pool(), out=P.passrate(ref), cache=P.passrate_cache(ref))


def test_passrate_cache_is_the_rl_start_policys_reference_cache(tmp_path):
    P = Paths(_cfg(tmp_path))
    assert P.passrate_cache("s") == P.reference_cache("s")
    assert P.passrate_cache("m") is None  # no cache of m: its pass rates are rolled out
    assert Paths(_cfg(tmp_path, samples=16, reference_n=8)).passrate_cache("s") is None


def test_measure_passrate_reads_the_cache_and_rolls_out_nothing(tmp_path, monkeypatch):
    import sparserl.evaluation.evaluate as ev
    cfg = _cfg(tmp_path)
    P = Paths(cfg)
    pool = pd.DataFrame({"id": ["a", "b", "c"], "problem": ["1 + 1", "2 + 2", "3 + 3"],
                         "answer": ["2", "4", "6"], "source": ["x", "x", "y"]})
    write_table(pool, P.train_pool())
    rewards = [[1, 1, 0, 0, 1, 1, 1, 1], [0] * 8, [1] * 8]
    lengths = [[3] * 8, [4] * 8, [5] * 4 + [9] * 4]
    write_table(pd.DataFrame({"prompt_id": ["c", "a", "b"], "n": 8,
                              "successes": [8, 6, 0], "phat": [1.0, 0.75, 0.0],
                              "rewards": [rewards[2], rewards[0], rewards[1]],
                              "lengths": [lengths[2], lengths[0], lengths[1]]}),
                P.reference_cache("s"), extra={"verifier": {"timeouts": 0}})

    def no_rollouts(*a, **k):
        raise AssertionError("the pass rates of s must come from its reference cache")
    monkeypatch.setattr(ev, "make_backend", no_rollouts)
    out = ev.measure_passrate(cfg, "s", **_files(cfg, "s"))
    # the first `samples` = 4 rollouts of each prompt, in pool order
    assert out["per_prompt"]["id"] == ["a", "b", "c"]
    assert out["per_prompt"]["p"] == [0.5, 0.0, 1.0]
    assert out["mean_response_tokens"] == pytest.approx((3 + 4 + 5) / 3)
    assert out["rollouts_from"].endswith("reference/s.parquet")
    manifest = json.loads(P.passrate("s").with_name("s.passrate.json.manifest.json").read_text())
    assert manifest["verifier"] == {"timeouts": 0}


def test_a_cache_without_lengths_or_prompts_is_named(tmp_path):
    import sparserl.evaluation.evaluate as ev
    cfg = _cfg(tmp_path)
    P = Paths(cfg)
    pool = pd.DataFrame({"id": ["a", "b"], "problem": ["1", "2"], "answer": ["1", "2"], "source": "x"})
    write_table(pool, P.train_pool())
    old = pd.DataFrame({"prompt_id": ["a", "b"], "n": 8, "successes": 1, "phat": 0.125,
                        "rewards": [[1] + [0] * 7] * 2})
    write_table(old, P.reference_cache("s"))
    with pytest.raises(ValueError, match=r"reference/s\.parquet: columns \['lengths'\] are missing"):
        ev.measure_passrate(cfg, "s", **_files(cfg, "s"))
    write_table(old.assign(lengths=[[2] * 8] * 2).iloc[:1], P.reference_cache("s"))
    with pytest.raises(ValueError, match=r"no rollouts of pool prompt 'b'"):
        ev.measure_passrate(cfg, "s", **_files(cfg, "s"))
