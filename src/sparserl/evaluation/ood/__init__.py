"""BASIS Table 2: out-of-domain evaluation of the GRPO-family checkpoints.

What the paper says (BASIS §5.2, Table 2): the GRPO variants post-trained on DAPO-Math-17K (GRPO
with G=8 rollouts per prompt, its vanilla single-rollout version, REINFORCE++'s global batch
baseline at G=1, and BASIS at G=1 trained for half the steps; "for the OOD evaluation, we apply
BASIS only to GRPO") are evaluated on five out-of-domain benchmarks, "HumanEval+ and MBPP+ for
code generation, MMLU-Pro for broad-domain knowledge and reasoning, MGSM for multilingual
mathematical reasoning, and IFEval for instruction following", each with "its standard task
metric" and their average. BASIS gains 14.4 points on average over vanilla G=1 and 4.1 over
REINFORCE++.

Modules: `common` (settings, policies, paths, the table), `procedural` (tiny and small), `harness`
(paper scale). One table holds every suite, `results/{scale}/ood/ood.parquet`, one row per (policy, benchmark):
`policy` is `start` (the RL start policy) or `<method>/seed<s>` (that run's `final/` checkpoint).

- **Paper scale** (`ood.lm_eval`, `ood.evalplus`; cluster only): lm-evaluation-harness (MMLU-Pro,
  MGSM, IFEval) and evalplus (HumanEval+, MBPP+) on vLLM, one job per checkpoint and harness
  (`sparserl ood-harness`), their JSON outputs parsed into the table (`sparserl ood-table`). The
  paper names neither harness versions, task variants nor shots: [our choice] lm-eval's `mmlu_pro`
  (5-shot, `exact_match,custom-extract`), MGSM as the unweighted mean of the eleven languages'
  `mgsm_native_cot_<lang>` tasks (`exact_match,flexible-extract`), IFEval's
  `prompt_level_strict_acc`, all under the chat template; evalplus greedy pass@1 on the plus
  tests (base + extra). The config names every task and metric key.
- **Tiny and small scale** (`ood.benchmarks`): reasoning-gym families the policies never trained
  on, held out like the in-domain benchmarks (the `eval` side of the hash split, none of the
  in-domain benchmarks' problems), under the evaluation protocol (`ood.protocol`, else
  `evaluation.default`). A family is admitted only if the policy can write its answers: every
  token of every answer target must occur in the pre-training corpus (`ood-tasks` refuses the
  benchmark otherwise); its prompts may hold tokens the policy never read, and the table says
  what share (`unseen_prompt_token_share`): that is what makes them out of domain.
"""
from __future__ import annotations

from .common import (EVALPLUS_NAMES, START, T2_METHODS, TABLE_COLUMNS, ood_settings, parse_label, policies,
                     t2_table, to_table)
from .harness import (evalplus_argv, find_evalplus_results, find_lm_eval_results, harness_outputs, harness_table,
                      lm_eval_argv, parse_evalplus, parse_lm_eval, run_harness)
from .procedural import build_ood_tasks, evaluate_ood, load_fast_tokenizer, write_ood_tasks

__all__ = ["EVALPLUS_NAMES", "START", "T2_METHODS", "TABLE_COLUMNS", "build_ood_tasks", "evalplus_argv", "evaluate_ood",
           "find_evalplus_results", "find_lm_eval_results", "harness_outputs", "harness_table", "lm_eval_argv", "load_fast_tokenizer",
           "ood_settings", "parse_evalplus", "parse_label", "parse_lm_eval", "policies", "run_harness",
           "t2_table", "to_table", "write_ood_tasks"]
