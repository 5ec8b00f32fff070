"""Evaluation: pass rates on the training pool and benchmark accuracy (`evaluate`)."""
from sparserl.evaluation.evaluate import (evaluate_checkpoint, evaluate_policy, measure_passrate,
                                          per_prompt_rates, protocol_for, summarize_evals,
                                          summarize_passrates)

__all__ = ["evaluate_checkpoint", "evaluate_policy", "measure_passrate", "per_prompt_rates", "protocol_for",
           "summarize_evals", "summarize_passrates"]
