"""Rollout throughput: our batched, KV-cached HF backend vs a plain one-prompt-at-a-time
`model.generate` loop, on the same policy, prompts and sampling settings, in one run.

    python perf/rollout_throughput.py [--policy results/tiny/policies/m] [--prompts 32]
        [--n 8] [--threads 2] [--json out.json] [--quick]

`--quick` (8 prompts x n=2, about 10 s) checks that the script runs; its numbers are noisy.
The plain loop, the slow part, reports its progress with an ETA on stderr.

Without a pre-trained policy it builds a random tiny Qwen3 model (same architecture as `m`),
forcing generation to the full `--max-new-tokens` so both paths produce the same token count.
Goal (foundation issue): at least 2x the plain loop's tokens per second.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sparserl.core.logs import progress, setup_logging  # noqa: E402
from sparserl.rollout import SamplingParams  # noqa: E402
from sparserl.rollout.hf import HFBackend  # noqa: E402


def load(policy: str | None, max_new: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if policy and Path(policy).exists():
        return AutoModelForCausalLM.from_pretrained(policy), AutoTokenizer.from_pretrained(policy), False
    from sparserl.models.policies import build_model
    from sparserl.models.tokenizer import train_tokenizer
    import tempfile
    texts = [f"Q: {a} + {b} * {c} =\nA: \\boxed{{{a + b * c}}}" for a in range(10)
             for b in range(10) for c in range(10)]
    tok = train_tokenizer(texts, 268, Path(tempfile.mkdtemp()) / "tok", 24)
    torch.manual_seed(0)
    model = build_model({"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2,
                         "ffn_size": 512}, tok, 24 + max_new)
    return model, tok, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="results/tiny/policies/m")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true",
                    help="8 prompts x n=2: a check that the script runs, not a measurement")
    a = ap.parse_args()
    if a.quick:
        a.prompts, a.n = min(a.prompts, 8), min(a.n, 2)
    setup_logging()
    torch.set_num_threads(a.threads)
    model, tok, random_model = load(a.policy, a.max_new_tokens)
    model.eval()
    if random_model:  # a random model rarely emits EOS; make sure neither path stops early
        model.generation_config.eos_token_id = None
    prompts = [f"Q: {i % 10} + {(3 * i) % 10} - {(7 * i) % 10} =\nA:" for i in range(a.prompts)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=a.max_new_tokens)

    be = HFBackend(model, tok, batch_size=a.batch_size)
    if random_model:
        be.eos_id = -1
    be.generate(prompts[:4], 2, params, seed=0)  # warm-up
    t0 = time.perf_counter()
    batch = be.generate(prompts, a.n, params, seed=1)
    t_ours = time.perf_counter() - t0
    tok_ours = int(batch.response_lengths().sum())

    # baseline: one prompt at a time, one completion per generate call
    gen_kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                  max_new_tokens=a.max_new_tokens, pad_token_id=tok.pad_token_id)
    if random_model:
        gen_kw["min_new_tokens"] = a.max_new_tokens
    t0 = time.perf_counter()
    tok_plain = 0
    bar = progress(a.prompts * a.n, "plain generate loop", unit="completion",
                   every=max(1, a.prompts * a.n // 10))
    with torch.no_grad():
        for p in prompts:
            ids = tok(p, return_tensors="pt", add_special_tokens=False)
            for _ in range(a.n):
                out = model.generate(**ids, **gen_kw)
                new = out[0, ids["input_ids"].shape[1]:]
                tok_plain += int((new != tok.pad_token_id).sum())
                bar.update(1)
    bar.close()
    t_plain = time.perf_counter() - t0

    res = {"policy": "random m-sized model" if random_model else a.policy,
           "prompts": a.prompts, "n": a.n, "completions": a.prompts * a.n, "threads": a.threads,
           "ours_tokens_per_s": tok_ours / t_ours, "plain_tokens_per_s": tok_plain / t_plain,
           "ours_s": t_ours, "plain_s": t_plain}
    res["speedup"] = res["ours_tokens_per_s"] / res["plain_tokens_per_s"]
    print(f"policy: {res['policy']}; {a.prompts} prompts x n={a.n}, {a.threads} threads")
    print(f"batched HF backend : {res['ours_tokens_per_s']:9.0f} tokens/s ({t_ours:.2f}s)")
    print(f"plain generate loop: {res['plain_tokens_per_s']:9.0f} tokens/s ({t_plain:.2f}s)")
    print(f"speedup: {res['speedup']:.1f}x (goal >= 2x)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
