"""Time one RL step of TRL's `GRPOTrainer` on CPU on our local trainer's small-scale workload.

An RL step is one generation batch of 256 rollouts (16 prompts x G=16, plain-text prompts
"Q: {problem} =\\nA:", up to 56 new tokens, temperature 1, no top-p/top-k) scored by our
`Verifier`, then 2 AdamW steps on mini-batches of 128 (TRL: generation_batch_size=256,
per_device_train_batch_size=128, so steps_per_generation=2). Loss: PPO-clip (eps 0.2), no KL,
per-sequence token mean then mean over sequences (loss_type "grpo"); lr 1.25e-5, constant,
weight decay 0, grad clip 1.0, float32. This is configs/small.yaml's `rl` with grpo_g16.

TRL is timed as installed; its methods are wrapped on the trainer instance only. The parts
are disjoint and add up to the step (`other` is the rest: data loading, advantages, logging):

    generation       GRPOTrainer._generate_single_turn (padding + HF generate + EOS masking)
    reward           inside our reward function (the verifier)
    gen_batch_other  rest of _prepare_inputs: tokenising, decoding, advantages, shuffle/split
    logprob_nograd   no-grad forwards: TRL's pi_old log-probs over all 256 rollouts
    train_forward    forwards with grad (log-probs + entropy), both mini-batches
    loss_other       rest of compute_loss: the loss and TRL's metrics
    backward         accelerator.backward
    clip_grad        accelerator.clip_grad_norm_
    optimizer_step   optimizer.step

Compare on an idle machine: with 2 threads and the other core busy, every multi-threaded op
waits for its second thread (measured beside other jobs: 31 s a step at 2 threads, 3.2 s at 1;
torch's AdamW step 0.75 s against 3 ms).

    PYTHONPATH=src python perf/rl_step_trl.py --policy results/small/policies/m \
        --pool results/small/tasks/train_pool.parquet [--steps 3] [--warmup 1] [--threads 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from collections import defaultdict

import pandas as pd
import torch

G, PROMPTS, MAX_NEW, MINI_BATCHES = 16, 16, 56, 2
UNMATCHED = [
    ("pi_old: TRL recomputes it with an extra no-grad forward over all 256 rollouts "
     "(steps_per_generation > gradient_accumulation_steps); ours under rl.precision bf16 recomputes "
     "it for the mini-batches after the first (the first's own forward gives it), in fp32 reuses "
     "the log-probs recorded while sampling"),
    ("precision: --bf16 turns on TRL's bf16 (a CPU autocast of the whole model, attention "
     "included); ours autocasts the decoder's projections only (rl.precision)"),
    ("generation: TRL runs HF model.generate on one left-padded batch of 256 (KV cache, every row "
     "decodes until all finish or 56 tokens); ours uses its own CPU rollout engine"),
    "advantage eps: TRL divides by (group std + 1e-4), ours by (group std + 1e-6)",
    "prompt sampling: TRL's RepeatSampler order (seeded), not our sampler's",
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", required=True)
    p.add_argument("--pool", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="TRL's bf16 (autocast) instead of float32")
    p.add_argument("--json", default=None)
    return p.parse_args()


class Parts:
    """Seconds per part within the current RL step; methods are wrapped on instances only."""

    def __init__(self):
        self.cur = defaultdict(float)

    def wrap(self, obj, attr, part, when=None):
        fn = getattr(obj, attr)

        @functools.wraps(fn)  # keeps torch's lr-scheduler marker on optimizer.step (else it warns)
        def timed(*a, **k):
            name = part if when is None else when()
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.cur[name] += time.perf_counter() - t
        setattr(obj, attr, timed)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    import transformers
    import trl
    from trl import GRPOConfig, GRPOTrainer
    import_s = time.perf_counter() - t
    from datasets import Dataset

    from sparserl.grading.verifier import Verifier

    n_steps = args.warmup + args.steps
    pool = pd.read_parquet(args.pool)
    ds = Dataset.from_dict({"prompt": [f"Q: {q} =\nA:" for q in pool["problem"]],
                            "answer": [str(a) for a in pool["answer"]]})
    tok = transformers.AutoTokenizer.from_pretrained(args.policy)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32)

    parts, lengths = Parts(), []

    def correct(completions, answer, completion_ids, **_):
        t0 = time.perf_counter()
        r = verifier.score(completions, answer)
        parts.cur["reward"] += time.perf_counter() - t0
        lengths.extend(len(c) for c in completion_ids)  # includes EOS when emitted, as ours does
        return r.tolist()

    cfg = GRPOConfig(
        output_dir="/tmp/rl_step_trl", report_to="none", save_strategy="no", logging_strategy="no",
        disable_tqdm=True, use_cpu=True, bf16=args.bf16, fp16=False, gradient_checkpointing=False,
        seed=args.seed, max_steps=n_steps * MINI_BATCHES,
        num_generations=G, generation_batch_size=G * PROMPTS,
        per_device_train_batch_size=G * PROMPTS // MINI_BATCHES, gradient_accumulation_steps=1,
        max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, epsilon=0.2, num_iterations=1, loss_type="grpo", scale_rewards="group",
        learning_rate=1.25e-5, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch",  # torch's single-tensor AdamW on CPU, the arithmetic of ours (TRL's default is fused)
        weight_decay=0.0, max_grad_norm=1.0, dataloader_num_workers=0,
    )
    steps, threads_seen = [], set()

    class StepTimer(transformers.TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            parts.wrap(trainer.optimizer, "step", "optimizer_step")  # exists only once train() starts
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if state.global_step % MINI_BATCHES == 0:  # the generation batch's last optimiser step
                now = time.perf_counter()
                steps.append((now - self.t, dict(parts.cur)))
                self.t, parts.cur = now, defaultdict(float)
                threads_seen.add(torch.get_num_threads())

    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[StepTimer()])
    parts.wrap(trainer, "_generate_single_turn", "generation")
    parts.wrap(trainer, "_prepare_inputs", "_prepare_inputs")
    parts.wrap(trainer, "compute_loss", "_compute_loss")
    parts.wrap(trainer, "_get_per_token_logps_and_entropies", None,
               when=lambda: "train_forward" if torch.is_grad_enabled() else "logprob_nograd")
    parts.wrap(trainer.accelerator, "backward", "backward")
    parts.wrap(trainer.accelerator, "clip_grad_norm_", "clip_grad")

    with Verifier(workers=2, timeout_s=5.0) as verifier:
        trainer.train()

    timed = steps[args.warmup:]
    per_step = [round(s, 4) for s, _ in timed]
    keys = set().union(*(p for _, p in timed))
    mean = {k: sum(p.get(k, 0.0) for _, p in timed) / len(timed) for k in sorted(keys)}
    mean["gen_batch_other"] = mean.pop("_prepare_inputs") - sum(
        mean.get(k, 0.0) for k in ("generation", "reward", "logprob_nograd"))
    mean["loss_other"] = mean.pop("_compute_loss") - mean.get("train_forward", 0.0)
    mean["other"] = sum(per_step) / len(per_step) - sum(mean.values())
    unmatched = list(UNMATCHED)
    if threads_seen != {args.threads}:
        unmatched.append(f"torch threads during training {sorted(threads_seen)}, asked {args.threads}")
    out = {
        "impl": "trl-bf16" if args.bf16 else "trl", "precision": "bf16" if args.bf16 else "fp32",
        "trl_version": trl.__version__, "transformers_version": transformers.__version__,
        "per_step_s": per_step, "parts_s": {k: round(v, 4) for k, v in mean.items()},
        "rollouts_per_step": G * PROMPTS,
        "mean_completion_len": round(sum(lengths[-len(timed) * G * PROMPTS:]) / (len(timed) * G * PROMPTS), 2),
        "unmatched": unmatched,
        "overlap": "none: parts are disjoint and sum to per_step; generation and scoring run before "
                   "training, serially (TRL has no overlap on this path)",
        "import_s": round(import_s, 3), "threads": args.threads,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
