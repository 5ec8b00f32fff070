"""The learning-vs-sharpening splits (sparserl.evaluation.splits) and EVPO's switch as the
tables read it. The greedy-wrong split is shown beside its complement, the slip-template split is
checked against a count by hand, and an EVPO run whose switch chose the critic at every step is
marked as its VF twin's run and counted once."""
import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.head_to_head_tables import write_runs
from sparserl.core.artifacts import write_table
from sparserl.core.paths import Paths
from sparserl.engines.report import critic_switch, greedy_wrong_split, on_split, switch_note, switch_twin
from sparserl.evaluation.splits import NO_SLIP, greedy_flips, slip_labels, slip_split
from sparserl.tasks import worked


def _pp(greedy, p=None):
    n = len(greedy)
    return pd.DataFrame({"benchmark": ["a"] * (n // 2) + ["b"] * (n - n // 2), "id": [f"q{i}" for i in range(n)],
                         "p": p if p is not None else [float(g) for g in greedy], "greedy": [float(g) for g in greedy]})


def test_a_large_greedy_wrong_gain_with_no_net_change_shows_in_the_complement():
    """20 of 40 problems greedy-wrong at the start; the final policy fixes 10 of them and breaks 10
    of the 20 it had right. On the split alone greedy rises by .5, which a plausible report (the
    split's gain only, or flips counted inside the split) reads as learning; the complement says
    greedy accuracy did not move."""
    start = _pp([0] * 20 + [1] * 20)
    final = _pp([1] * 10 + [0] * 10 + [0] * 10 + [1] * 10)
    split = start[start["greedy"] == 0]
    gain = on_split(final, split, "final")["eval_greedy_wrong_greedy"] - on_split(start, split, "start")[
        "eval_greedy_wrong_greedy"]
    assert gain == pytest.approx(0.5)
    f = greedy_flips(start, final)
    assert (f["greedy_wrong_to_right"], f["greedy_right_to_wrong"]) == (10, 10)
    assert (f["greedy_wrong_problems"], f["greedy_right_problems"]) == (20, 20)
    assert f["greedy_flip_net"] == 0.0
    # one more fixed problem moves the net by 1/40
    final.loc[10, "greedy"] = 1.0
    assert greedy_flips(start, final)["greedy_flip_net"] == pytest.approx(1 / 40)


def test_flips_refuse_tables_of_other_problems():
    start, final = _pp([0, 1, 1, 0]), _pp([1, 1, 0, 0])
    with pytest.raises(ValueError, match="only one of the start and final"):
        greedy_flips(start, final.assign(id=["q0", "q1", "q2", "zz"]), "run x")


def test_the_slip_split_by_hand():
    """Six problems, slip templates on q0, q1, q4. Slip templates: start greedy (0 + 1 + 1) / 3,
    final (1 + 1 + 0) / 3, no change; other templates q2, q3, q5: start (0 + 1 + 0) / 3, final
    (1 + 0 + 1) / 3."""
    start = _pp([0, 1, 0, 1, 1, 0])
    final = _pp([1, 1, 1, 0, 0, 1])
    labels = start[["benchmark", "id"]].assign(slip=[True, True, False, False, True, False])
    s = slip_split(start, final, labels)
    assert s["slip_split"] == "3 slip-template / 3 other problems"
    assert (s["slip_problems"], s["other_problems"]) == (3, 3)
    assert s["start_eval_slip_greedy"] == pytest.approx(2 / 3) and s["eval_slip_greedy_final"] == pytest.approx(2 / 3)
    assert s["eval_slip_greedy_gain"] == pytest.approx(0.0)
    assert s["start_eval_other_greedy"] == pytest.approx(1 / 3) and s["eval_other_greedy_final"] == pytest.approx(2 / 3)
    assert s["eval_other_greedy_gain"] == pytest.approx(1 / 3)
    # a problem missing from the labels is another task split's table, not "other"
    with pytest.raises(ValueError, match="in no benchmark of the config"):
        slip_split(start, final, labels.iloc[1:])


def test_world_1_has_no_slip_split_and_says_so(tmp_path):
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "tasks": {"world": None, "benchmarks": ["a"]}}
    assert slip_labels(Paths(cfg)) is None
    s = slip_split(_pp([0, 1]), _pp([1, 1]), None)
    assert s["slip_split"] == NO_SLIP and np.isnan(s["eval_slip_greedy_gain"]) and np.isnan(s["start_eval_other_greedy"])


def test_slip_labels_follow_the_hash_of_each_template(tmp_path):
    """world 2.0: each benchmark problem is labelled by `worked.is_slip_template` of its template,
    with the config's share and salt; both kinds occur among these problems."""
    world = {"slip_share": 0.5, "salt": 3}
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "tasks": {"world": world, "benchmarks": ["x", "y"]}}
    probs = {"x": ["7 + 5", "9 - 3", "2 + 3 * 4", "8 - 9"], "y": ["12 + 19 - 4", "4 - 1 * 7 - 7", "3 + 4"]}
    for b, ps in probs.items():
        write_table(pd.DataFrame({"id": [f"{b}/{i}" for i in range(len(ps))], "problem": ps,
                                  "answer": "0"}), Paths(cfg).benchmark(b))
    got = slip_labels(Paths(cfg))
    w = worked.settings(cfg["tasks"])
    want = [worked.is_slip_template(worked.template(q), w["slip_share"], w["salt"]) for ps in probs.values() for q in ps]
    assert got["slip"].tolist() == want and got["benchmark"].tolist() == ["x"] * 4 + ["y"] * 3
    assert 0 < sum(want) < len(want)


def test_the_run_summary_reports_both_flips_and_the_world_1_slip_note(tmp_path):
    """runs.parquet and summary.parquet carry the flips both ways and the net (seed means), and in
    world 1 a slip split that says there is none."""
    from sparserl.engines.report import summarize_runs
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "rollout": {"backend": "cpu"},
           "rl": {"policy": "s", "methods": ["grpo_g8"], "seeds": [0, 1], "steps": 10, "rollouts_per_step": 16}}
    P = Paths(cfg)
    start = _pp([1, 0, 1, 0])
    write_table(pd.DataFrame({"benchmark": ["a", "b"], "accuracy": [0.5, 0.5], "pass_at_k": 1.0,
                              "pass_metric": "pass@16", "greedy_accuracy": [0.5, 0.5]}), P.eval_table("s"))
    write_table(start.assign(**{"pass": 1.0}), P.stage("eval", "s", "eval_per_problem.parquet"))
    # seed 0: q1 wrong -> right, q0 right -> wrong; seed 1: q1, q3 wrong -> right, q2 right -> wrong
    for seed, g in {0: [0, 1, 1, 0], 1: [1, 1, 0, 1]}.items():
        run = P.run("grpo_g8", seed)
        write_table(pd.DataFrame({"step": range(1, 11), "rollouts_generated": 16, "rollouts_total": np.arange(1, 11) * 16,
                                  "rollouts_per_prompt_mean": 8.0, "reward_mean": 0.3, "wall_time_s": 1.0}), run.metrics)
        pp = _pp(g).assign(**{"pass": 1.0})
        write_table(pp, run.eval_dir / "final_per_problem.parquet")
        by = pp.groupby("benchmark", sort=True)
        write_table(pd.DataFrame({"checkpoint": "final", "benchmark": ["a", "b"], "accuracy": by["p"].mean().values,
                                  "pass_at_k": 1.0, "pass_metric": "pass@16",
                                  "greedy_accuracy": by["greedy"].mean().values}), run.eval)
    summarize_runs(cfg, Paths(cfg))
    runs = pd.read_parquet(P.rl_runs())
    assert runs["greedy_wrong_to_right"].tolist() == [1, 2] and runs["greedy_right_to_wrong"].tolist() == [1, 1]
    assert runs["greedy_flip_net"].tolist() == [0.0, 0.25]
    agg = pd.read_parquet(P.rl_summary()).set_index("method").loc["grpo_g8"]
    assert agg["greedy_wrong_to_right"] == 1.5 and agg["greedy_flip_net"] == pytest.approx(0.125)
    assert agg["slip_split"] == NO_SLIP and np.isnan(agg["eval_slip_greedy_gain"])
    assert len(greedy_wrong_split(Paths(cfg))) == 2


# --- EVPO's switch (Le Critique App. C) ------------------------------------------------------------

def test_evpo_twin_and_switch_note():
    methods = ["grpo_g8", "lc_math_vf_g8", "lc_math_evpo_g8"]
    assert switch_twin("lc_math_evpo_g8", methods) == "lc_math_vf_g8"
    assert switch_twin("lc_math_evpo_g8", ["grpo_g8"]) is None
    assert switch_twin("lc_math_vf_g8", methods) is None  # not an EVPO method
    assert switch_twin("lc_evpo", methods) is None  # another loss aggregation: not lc_math_vf_g8's spec
    assert critic_switch(pd.DataFrame({"step": [1, 2]})) is None
    assert critic_switch(pd.DataFrame({"est_evpo_use_critic": [1.0, 0.0, 1.0]})) == (2, 3)
    assert switch_note("lc_math_evpo_g8", methods, [(40, 40), (40, 40)]) == (
        "lc_math_vf_g8", "= lc_math_vf_g8 (switch on at every step: 80/80)")
    assert switch_note("lc_math_evpo_g8", methods, [(39, 40)]) == ("", "critic at 39/40 steps")
    assert switch_note("lc_math_evpo_g8", ["lc_math_evpo_g8"], [(40, 40)]) == ("", "critic at 40/40 steps")
    assert switch_note("grpo_g8", methods, [None]) == ("", "")


@pytest.mark.parametrize("on", [4, 3])
def test_an_evpo_run_on_the_critic_at_every_step_is_vf_in_the_ranking(repo, tmp_path, monkeypatch, on):
    """EVPO and VF score the same; with the switch on at all 4 steps EVPO is marked '= VF', shares
    VF's bootstrap draw and does not push GRPO down a rank; at 3 of 4 it is a method of its own."""
    from sparserl.core.artifacts import read_table
    from sparserl.methods.run import method_run
    from sparserl.core.paths import Paths
    from sparserl.studies.head_to_head import write_head_to_head
    monkeypatch.chdir(tmp_path)
    c = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    rl = yaml.safe_load((repo / "configs/tiny.yaml").read_text())["rl"]
    methods = ["lc_math_vf_g8", "lc_math_evpo_g8", "grpo_g8"]
    c["rl"] = {**rl, "methods": methods, "seeds": [0], "steps": 4, "rollouts_per_step": 64}
    write_runs(c, scores=lambda m, s, p0: np.clip(p0 + (0.0 if m == "grpo_g8" else 0.2), 0, 1))
    path = method_run(c, "lc_math_evpo_g8", 0).metrics
    met = read_table(path)
    write_table(met.assign(est_evpo_use_critic=[1.0] * on + [0.0] * (4 - on)), path, cfg=c)
    r = read_table(write_head_to_head(Paths(c), n_boot=100)["ranking"]).set_index("method")
    evpo = r.loc["lc_math_evpo_g8"]
    assert evpo["critic_switch_share"] == on / 4
    if on == 4:
        assert evpo["same_as"] == "lc_math_vf_g8"
        assert evpo["critic_switch"] == "= lc_math_vf_g8 (switch on at every step: 4/4)"
        assert r.loc["grpo_g8", "rank"] == 2  # VF and EVPO are one run above it
    else:
        assert evpo["same_as"] == "" and evpo["critic_switch"] == "critic at 3/4 steps"
        assert r.loc["grpo_g8", "rank"] == 3
    assert r.loc["lc_math_vf_g8", "critic_switch"] == "" and np.isnan(r.loc["lc_math_vf_g8", "critic_switch_share"])
    # the splits sit beside the ranking: smoke is world 1, so no slip split, and both flips
    assert (r["slip_split"] == NO_SLIP).all() and {"greedy_wrong_to_right", "greedy_right_to_wrong"} <= set(r)
