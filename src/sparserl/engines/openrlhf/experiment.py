"""A Le Critique experiment's run settings on OpenRLHF 0.11.2: `critique.rl` with the
experiment's own `rl`, lengths resolved, and its method spec (group size K); the run's files are
its `methods.run.resolve_critique_run` record's.
Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Appendix D. Read by the run's driver (`critique`) and by the cost model (`engines.sizing`), which
sizes the run's resume cadence for the driver; imports nothing of OpenRLHF."""
from __future__ import annotations

from sparserl.core.config import schema_default, section_setting

END_OF_TURN = "<|im_end|>"  # Qwen3's ChatML
TURN_TEMPLATE = "\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"


def settings(cfg: dict, exp: str) -> dict:
    """The experiment's run settings: `critique.rl` with its own `rl`, lengths resolved."""
    from sparserl.envs.world import experiment_rl
    rl = experiment_rl(cfg, exp)
    max_new = int(rl["max_new_tokens"])
    return {**rl, "max_new_tokens": max_new, "max_len": int(rl.get("max_len") or max_new + 2048),
            "temperature": float(section_setting(rl, "critique", "rl", "temperature")),
            "end_of_turn": str(rl.get("end_of_turn", END_OF_TURN)),
            "turn_template": str(rl.get("turn_template", TURN_TEMPLATE)),
            "eval": dict(rl.get("eval") or {k: schema_default("$defs", "critique_rl", "eval", k)
                                             for k in ("problems", "samples")})}


def run_method(cfg: dict, exp: str, method_name: str):
    """The method spec of a run: group size = the experiment's K (as the local engine), the
    scale's critic lr (`critique.rl.critic_lr`) when set (`methods.run.resolve_critique_run`)."""
    from sparserl.methods.run import resolve_critique_run
    return resolve_critique_run(cfg, exp, method_name, 0).spec


__all__ = ["END_OF_TURN", "TURN_TEMPLATE", "run_method", "settings"]
