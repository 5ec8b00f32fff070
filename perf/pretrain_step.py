"""Pre-training steps of a scale's policies, side by side: transformers in float32 (the default),
our Qwen3 compiled, and our Qwen3 compiled with bf16 matmuls (`pretrain.precision`, `pretrain.compile`).

Each variant starts from the same transformers initialisation and trains on the same batches
(the scale's corpus, batch size and length chunks); the variants alternate step by step in one
process, so the machine's drift hits them alike. Reported per policy and variant: seconds a step
(median after the first `--warmup` steps), the first steps' cost (compilation), the job's estimated
time (`steps` x the median + the warm-up's excess) and the mean loss of the measured steps (the
variants should agree to the second decimal).

    python perf/pretrain_step.py --config configs/tiny.yaml --results results/tiny [--steps 12] [--threads 1]

`--results` holds the scale's tokenizer and pre-training corpus (`snakemake --cores 2
results/tiny/tokenizer results/tiny/tasks/pretrain_corpus.parquet`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/tiny.yaml")
    p.add_argument("--results", default="results/tiny", type=Path)
    p.add_argument("--policies", nargs="*", help="default: every pre-trained policy of the config")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args()

    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.models import policies as P
    from sparserl.models.qwen3 import Qwen3LM

    torch.set_num_threads(args.threads)
    import torch._dynamo
    # two compiled variants share the layers' code: each keeps its own graphs
    torch._dynamo.config.recompile_limit = 64
    cfg = load_config(args.config)
    cfg["results_dir"] = str(args.results.resolve().parent)
    paths = Paths(cfg)
    tok = AutoTokenizer.from_pretrained(str(paths.tokenizer()))
    max_length = cfg["tokenizer"]["max_length"]
    ids, mask, _ = P.encode_corpus(cfg, pd.read_parquet(paths.pretrain_corpus()), tok, max_length)
    pt = cfg.get("pretrain", {})
    bs, chunks = pt.get("batch_size", 128), pt.get("length_chunks", 1)
    names = args.policies or [n for n, pol in cfg["policies"].items() if pol.get("source") == "pretrain"]
    out = {}
    for name in names:
        pol = cfg["policies"][name]
        torch.manual_seed(0)
        hf = P.build_model(pol, tok, max_length)
        models = {"fp32 (transformers)": hf}
        ours = Qwen3LM.from_module(hf)
        ours.compile_layers()
        models["compile"] = ours
        both = Qwen3LM.from_module(hf)
        both.matmul_dtype = torch.bfloat16
        both.compile_layers()
        models["bf16 + compile"] = both
        opts = {k: torch.optim.AdamW(m.parameters(), lr=pol["lr"]) for k, m in models.items()}
        gen = torch.Generator().manual_seed(0)
        times = {k: [] for k in models}
        losses = {k: [] for k in models}
        for _ in range(args.warmup + args.steps):
            idx = torch.randint(0, ids.shape[0], (bs,), generator=gen)
            for k, m in models.items():
                t0 = time.perf_counter()
                opts[k].zero_grad(set_to_none=True)
                loss = P.batch_loss(m, ids[idx], mask[idx], chunks)
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opts[k].step()
                times[k].append(time.perf_counter() - t0)
                losses[k].append(float(loss))
        rows = {}
        for k in models:
            med = statistics.median(times[k][args.warmup:])
            excess = sum(times[k][:args.warmup]) - args.warmup * med
            rows[k] = {"s_per_step": med, "warmup_excess_s": excess,
                       "job_estimate_s": pol["steps"] * med + excess,
                       "loss": statistics.fmean(losses[k][args.warmup:])}
        out[name] = {"steps": pol["steps"], "variants": rows}
        print(f"\n## policy {name} ({pol['steps']} steps, hidden {pol['hidden_size']}, {pol['num_layers']} layers)")
        print("| variant | s a step | first steps' excess s | job estimate s | loss |\n|---|---|---|---|---|")
        for k, r in rows.items():
            print(f"| {k} | {r['s_per_step']:.3f} | {r['warmup_excess_s']:.1f} | {r['job_estimate_s']:.0f} | {r['loss']:.4f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
