"""Prompt and target formatting. One answer convention everywhere: ``\\boxed{...}``."""
from __future__ import annotations

from sparserl.core.config import setting

PAPER_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def format_prompt(cfg: dict, problem: str, tokenizer=None) -> str:
    """Tiny: ``Q: {problem} =\\nA:``. Paper: the policy's chat template around problem + instruction."""
    t = cfg["tasks"]
    if t.get("chat_template"):
        if tokenizer is None:
            raise ValueError("tasks.chat_template is true: format_prompt needs the policy tokenizer")
        content = t["prompt_template"].format(problem=problem, instruction=PAPER_INSTRUCTION)
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    return t["prompt_template"].format(problem=problem)


def format_target(cfg: dict, answer: str) -> str:
    return setting(cfg, "tasks", "answer_template").format(answer=answer)


def corpus_targets(cfg: dict, corpus) -> list[str]:
    """The pre-training targets of corpus rows: world 2.0's worked solutions (column `target`,
    sparserl.tasks.worked), else the answer template around `answer`."""
    if "target" in corpus.columns:
        return list(corpus["target"])
    return [format_target(cfg, a) for a in corpus["answer"]]
