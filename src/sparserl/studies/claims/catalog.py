"""The claims: one `Claim` per headline claim of the four papers, in `CLAIMS`.
"""
from __future__ import annotations

import numpy as np

from .basis import (
    basis_headline,
    basis_inputs,
    basis_refined_vs_initial,
    basis_sensitivity_n,
    checkpoint_inputs,
)
from .le_critique import critic_learns, critique_diff, tether_rho
from .rl import collapses, gain_margin, rl_diff
from .rule import NI_FRACTION, Claim
from .v0 import auc_margin, v0_auc


def _claims() -> list[Claim]:
    C = []
    add = lambda **kw: C.append(Claim(**kw))  # noqa: E731

    # V0 (paper 001): Tables 1 and 2, Figure 5 (left)
    add(id="v0.sequential_auc", paper="V0", target="v0/t1",
        claim="V0 maintains high accuracy (Intra-AUC >0.85) from the very first step (Table 1, sequential alignment)",
        paper_number="Intra-AUC > 0.85", quantity="intra-context AUC of V0, sequential protocol, every policy",
        relation=">", threshold=0.85, paper_value=0.85, scale_free=True, **v0_auc("sequential", "v0"))
    add(id="v0.sequential_vs_vanilla", paper="V0", target="v0/t1",
        claim="V0 consistently outperforms coupled baselines across all architectures (Table 1)",
        paper_number="V0 above the Vanilla VM (Table 1)",
        quantity="AUC(V0) - AUC(vanilla value model), sequential", relation=">", threshold=0.0,
        **v0_auc("sequential", "v0", "vanilla_value_model"))
    add(id="v0.sequential_matches_stepwise", paper="V0", target="v0/t1",
        claim="it matches the computationally expensive Step-wise Retrain method (Table 1)",
        paper_number="V0 = Step-wise Retrain",
        quantity=f"AUC(V0) - AUC(step-wise retrain), sequential; 'matches' = above -{NI_FRACTION:g} x step-wise "
                 "retrain's AUC above chance", relation=">", threshold=np.nan,
        margin=auc_margin("sequential", "stepwise_retrain", "step-wise retrain"),
        **v0_auc("sequential", "v0", "stepwise_retrain"))
    add(id="v0.strict_vs_vanilla", paper="V0", target="v0/t2",
        claim="the Vanilla VM collapses to near-random guessing (AUC .560). In contrast, V0 retains robust "
              "predictive power (AUC .710) (Table 2, strict generalisation)",
        paper_number=".710 vs .560 (+.150)", quantity="AUC(V0) - AUC(vanilla value model), strict",
        relation=">", threshold=0.0, paper_value=0.150, scale_free=True,
        **v0_auc("strict", "v0", "vanilla_value_model"))
    add(id="v0.budget_allocation", paper="V0", target="v0/f5_budget",
        claim="By using V0 to estimate sample difficulty ... improving performance on OlympiadBench by ~2% "
              "compared to the allocation baselines w/o using V0 (Figure 5, left)",
        paper_number="+~2 points", quantity="accuracy(V0 budget allocation) - accuracy(uniform GRPO G=8)",
        relation=">", threshold=0.0, paper_value=0.02, **rl_diff("grpo_budget_v0", "grpo_g8"))

    # V0.5 (paper 000, the analysis of arXiv 2603.10848): Figures 1 and 5
    add(id="v05.osla_vs_grpo16", paper="V0.5", target="v05/f1",
        claim="V0.5 with only 4 initial rollouts outperforms standard GRPO and DAPO at 16 rollouts, achieving "
              "over 10% absolute accuracy improvement (Figure 1)",
        paper_number="> +10 points", quantity="accuracy(V0.5 OSLA) - accuracy(GRPO G=16)",
        relation=">", threshold=0.0, paper_value=0.10, **rl_diff("v05_osla", "grpo_g16"))
    add(id="v05.osla_vs_dapo16", paper="V0.5", target="v05/f1",
        claim="The relative ordering is consistently V0.5 > DAPO > GRPO on all benchmarks (Figure 1)",
        paper_number="V0.5 above DAPO G=16", quantity="accuracy(V0.5 OSLA) - accuracy(DAPO G=16)",
        relation=">", threshold=0.0, **rl_diff("v05_osla", "dapo_g16"))
    add(id="v05.k4_vs_grpo16", paper="V0.5", target="v05/f5",
        claim="With k = 4 or k = 8, V0.5 (fusion only, no dynamic allocation) matches or outperforms GRPO at "
              "G = 16 across all six benchmarks (Figure 5)",
        paper_number="k=4 >= G=16 (curves, no numbers)",
        quantity=f"accuracy(V0.5 k=4) - accuracy(GRPO G=16); 'matches' = above -{NI_FRACTION:g} x GRPO G=16's "
                 "gain", relation=">", threshold=np.nan, margin=gain_margin("grpo_g16", "GRPO G=16"),
        **rl_diff("v05_k4", "grpo_g16"))
    add(id="v05.k8_vs_grpo16", paper="V0.5", target="v05/f5",
        claim="With k = 8, V0.5 outperforms GRPO (G = 16) more clearly, achieving higher final accuracy (Figure 5)",
        paper_number="k=8 > G=16 (curves)", quantity="accuracy(V0.5 k=8) - accuracy(GRPO G=16)",
        relation=">", threshold=0.0, **rl_diff("v05_k8", "grpo_g16"))
    for k in (1, 2):
        add(id=f"v05.k{k}_collapse", paper="V0.5", target="v05/f5",
            claim=f"convergence fails completely at k = 1, 2 but succeeds at k = 4, 8 (Figure 5; here k = {k})",
            paper_number=f"k={k} fails, k=4 converges", quantity=f"accuracy(V0.5 k={k}) - accuracy(V0.5 k=4)",
            relation="<", threshold=0.0, premise=collapses(f"v05_k{k}", f"V0.5 k={k}"),
            **rl_diff(f"v05_k{k}", "v05_k4"))
    add(id="v05.osla_vs_k4", paper="V0.5", target="v05/f5",
        claim="V0.5 with OSLA (Figure 1) achieves higher final accuracy than V0.5 with fixed k = 4 (Figure 5) "
              "on most benchmarks, though the improvement is modest",
        paper_number="OSLA > k=4 (modest)", quantity="accuracy(V0.5 OSLA) - accuracy(V0.5 k=4)",
        relation=">", threshold=0.0, **rl_diff("v05_osla", "v05_k4"))
    add(id="v05.k4_vs_grpo4", paper="V0.5", target="head_to_head/final",
        claim="The paper's implicit claim is that GRPO at G = 4 would perform worse (not shown; the analysis)",
        paper_number="not measured by the paper", quantity="accuracy(V0.5 k=4) - accuracy(GRPO G=4)",
        relation=">", threshold=0.0, **rl_diff("v05_k4", "grpo_g4"))

    # BASIS (paper 004): Section 5.1, Figures 2, 3a, 5; Table 1
    add(id="basis.mse_vs_reinforce_pp", paper="BASIS", target="basis/f3a",
        claim="Compared with single-rollout baselines such as REINFORCE++, BASIS reduces the MSE by 69% (Figure 3a)",
        paper_number="-69%", quantity="100 (MSE(BASIS G=1) / MSE(REINFORCE++ G=1) - 1)", fmt="{:+.1f}%",
        relation="<", threshold=0.0, paper_value=-69.0, scale_free=True, **basis_headline("basis_vs_reinforce_pp_pct"))
    add(id="basis.mse_vs_grpo8", paper="BASIS", target="basis/f3a",
        claim="even with one rollout per prompt, BASIS achieves lower MSE than GRPO and RLOO with 8 rollouts (Figure 3a)",
        paper_number="MSE(BASIS G=1) < MSE(GRPO G=8)", quantity="100 (MSE(BASIS G=1) / MSE(GRPO G=8) - 1)",
        fmt="{:+.1f}%", relation="<", threshold=0.0, scale_free=True, **basis_headline("basis_vs_grpo_g8_pct"))
    add(id="basis.refined_vs_initial", paper="BASIS", target="basis/f2",
        claim="the refined estimator achieves considerably lower MSE and is much less sensitive to a calibration "
              "hyperparameter (Figure 2)",
        paper_number="refined < initial", quantity="100 (MSE(refined) / MSE(initial) - 1)", fmt="{:+.1f}%",
        relation="<", threshold=0.0, inputs=checkpoint_inputs("stage_initial_vs_refined"),
        measure=basis_refined_vs_initial)
    add(id="basis.sensitivity_n", paper="BASIS", target="basis/f5b",
        claim="Increasing the offline cache from n=8 to n=64 reduces MSE by approximately 55-59% (Figure 5)",
        paper_number="-55% to -59%", quantity="100 (MSE(n=64) / MSE(n=8) - 1), BASIS G=1", fmt="{:+.1f}%",
        relation="<", threshold=0.0, paper_value=(-59.0, -55.0), scale_free=True,
        inputs=basis_inputs("sensitivity_n"), measure=basis_sensitivity_n)
    add(id="basis.rl_vs_grpo8", paper="BASIS", target="basis/t1",
        claim="BASIS is competitive with 8-rollout methods while halving the online learning budget ... a gain of "
              "0.2 percentage points (Table 1, GRPO)",
        paper_number="+0.2 points at 76.8K vs 153.6K rollouts",
        quantity=f"accuracy(GRPO G=1 + BASIS, half the steps) - accuracy(GRPO G=8); 'competitive' = above "
                 f"-{NI_FRACTION:g} x GRPO G=8's gain", relation=">", threshold=np.nan, paper_value=0.002,
        margin=gain_margin("grpo_g8", "GRPO G=8"), **rl_diff("basis_grid_grpo_g1_basis", "grpo_g8"))
    add(id="basis.rl_vs_rpp", paper="BASIS", target="basis/t1",
        claim="BASIS improves the average accuracy ... by 4.2 and 2.0 percentage points over their REINFORCE++ "
              "variants (Table 1, GRPO: 4.2)",
        paper_number="+4.2 points", quantity="accuracy(GRPO G=1 + BASIS) - accuracy(GRPO G=1 + REINFORCE++)",
        relation=">", threshold=0.0, paper_value=0.042, **rl_diff("basis_grid_grpo_g1_basis", "basis_grid_grpo_g1_rpp"))
    add(id="basis.rl_vs_vanilla", paper="BASIS", target="basis/t1",
        claim="BASIS improves the average accuracy across the seven benchmarks by 28.1 and 25.6 percentage points "
              "over single-rollout vanilla GRPO and GPG (Table 1, GRPO: 28.1)",
        paper_number="+28.1 points", quantity="accuracy(GRPO G=1 + BASIS) - accuracy(vanilla GRPO G=1)",
        relation=">", threshold=0.0, paper_value=0.281,
        premise=collapses("basis_grid_grpo_g1_vanilla", "vanilla GRPO G=1"),
        **rl_diff("basis_grid_grpo_g1_basis", "basis_grid_grpo_g1_vanilla"))

    # Le Critique (paper 002): Figures 3-7, per task
    tasks = {"rg_k1": "Reasoning Gym K=1", "rg_k8": "Reasoning Gym K=8", "codeio_k4": "CodeIO K=4",
             "sudoku_k4": "Sudoku K=4"}
    for exp, name in tasks.items():
        add(id=f"lc.pvf_ev.{exp}", paper="Le Critique", target="le_critique/f4",
            claim=f"Pvf explains more return variance than VF in every environment (Figure 4; {name})",
            paper_number="EV(Pvf) > EV(VF) (bars)", quantity=f"EV(Pvf) - EV(VF), final {50} value batches, {name}",
            relation=">", threshold=0.0, **critique_diff(exp, "ev_final", "pvf", "vf"))
    for exp, name in tasks.items():
        add(id=f"lc.pvf_reward.{exp}", paper="Le Critique", target="le_critique/f7",
            claim=f"privileged conditioning improves the value baseline across all four tasks (Figures 3, 7; {name})",
            paper_number="Pvf > VF (curves)", quantity=f"final train reward(Pvf) - (VF), {name}",
            relation=">", threshold=0.0, premise=critic_learns(exp), **critique_diff(exp, "final_reward", "pvf", "vf"))
    for exp in ("rg_k8", "codeio_k4", "sudoku_k4"):
        add(id=f"lc.tether_vs_vf.{exp}", paper="Le Critique", target="le_critique/f5",
            claim=f"Tether consistently outperforms the simple value function baseline (VF) across all four tasks "
                  f"(Figures 5, 7; {tasks[exp]})",
            paper_number="Tether > VF (curves)", quantity=f"final train reward(Tether) - (VF), {tasks[exp]}",
            relation=">", threshold=0.0, premise=critic_learns(exp),
            **critique_diff(exp, "final_reward", "tether", "vf"))
    for exp in ("rg_k8", "codeio_k4", "sudoku_k4"):
        add(id=f"lc.rho.{exp}", paper="Le Critique", target="le_critique/f6",
            claim=f"All runs begin with rho=0 ... The coefficient then moves away from zero (Figure 6; {tasks[exp]})",
            paper_number="rho: 0 -> above 0", quantity=f"Tether's final rho, {tasks[exp]}",
            relation=">", threshold=0.0, scale_free=True, **tether_rho(exp))
    add(id="lc.vf_vs_mean.rg_k8", paper="Le Critique", target="le_critique/f7",
        claim="The improvement is smaller but still present at K=8, and both value baselines beat Mean in this task "
              "(Reasoning Gym K=8)",
        paper_number="VF > Mean", quantity="final train reward(VF) - (Mean), Reasoning Gym K=8",
        relation=">", threshold=0.0, premise=critic_learns("rg_k8"),
        **critique_diff("rg_k8", "final_reward", "vf", "mean"))
    add(id="lc.vf_vs_mean.sudoku_k4", paper="Le Critique", target="le_critique/f7",
        claim="Although it does not fully recover the performance of Mean on Sudoku, it substantially mitigates the "
              "degradation suffered by VF (Sudoku)",
        paper_number="VF < Mean", quantity="final train reward(VF) - (Mean), Sudoku K=4",
        relation="<", threshold=0.0, premise=critic_learns("sudoku_k4"),
        **critique_diff("sudoku_k4", "final_reward", "vf", "mean"))
    return C


CLAIMS: list[Claim] = _claims()
