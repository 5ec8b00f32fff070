"""The work of V0's Snakemake rules at a config's scale, and the least resources it needs.

`v0_rule_estimates(cfg)` -> {rule: {"gpus", "mem_mb", "runtime" (minutes), "work" (the arithmetic)}}.
The `resources` group each rule of workflow/rules/values.smk takes (`V0_RESOURCES`) must cover its
estimate; tests/test_v0_paper.py checks configs/paper.yaml against it, and the same numbers are in
docs/cluster.md. Throughputs are assumptions (named constants below), not measurements: no GPU
run of the paper scale has been made.
"""
from __future__ import annotations

import math

# rule -> the `resources` group of configs/<scale>.yaml it takes (workflow/rules/values.smk)
V0_RESOURCES = {
    "v0_pool_embeddings": "v0_embed", "v0_embeddings": "v0_embed",
    "v0_table": "v0_train", "v0_ablations": "v0_ablations",
    "v0_routing": "v0_cpu", "v0_harvest_values_shard": "rollout", "v0_harvest_values": "rollout",
    "v0_harvest_merge": "cpu_small",
}

# held-out benchmark sizes (problems) of configs/paper.yaml
BENCHMARK_SIZES = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva_math": 272,
                   "olympiadbench": 675, "hmmt_feb_2025": 30}
DAPO_PROMPTS = 17_398          # DAPO-Math-17k's distinct prompts
EMBED_TOKENS_PER_S = 15_000    # a 0.6B encoder in float32 on one GPU (~18 TFLOP/s at 1.2 GFLOP/token)
EPISODE_S = 0.04               # one V0 episode (context 256 + 8 queries) forward + backward on one GPU
GEN_TOKENS_PER_S = 20_000      # vLLM decoding, <= 7B model, bf16, one GPU, thousands of sequences
MEAN_RESPONSE_TOKENS = 4_096   # reasoning models at max_new_tokens 8192: half the cap on average
HOST_GB = 8                    # python, torch, the model weights and the harvest table
MARGIN = 1.5                   # runtime and memory asked / estimated


def _mb(gb: float) -> int:
    return int(math.ceil(gb * MARGIN * 1024))


def _min(seconds: float) -> int:
    return int(math.ceil(seconds * MARGIN / 60))


def v0_rule_estimates(cfg: dict) -> dict:
    from sparserl.engines.harvest import checkpoint_steps, harvest_settings
    from sparserl.values.v0.settings import v0_settings
    s, h = v0_settings(cfg), harvest_settings(cfg)
    bench = sum(BENCHMARK_SIZES.get(b, 500) for b in cfg["tasks"].get("benchmarks", []))
    ckpts = len(checkpoint_steps(h)) + 1
    T, d = int(s["embedder"]["max_length"]), 1024  # Qwen3-Embedding-0.6B: d = 1024
    prompts = DAPO_PROMPTS + bench  # on-policy prompts are pool prompts: at most the whole pool
    table_gb = prompts * T * d * 2 / 2**30  # float16 states padded to the longest prompt (<= T)
    out = {}
    embed_s = prompts * T / EMBED_TOKENS_PER_S
    out["v0_embeddings"] = out["v0_pool_embeddings"] = {
        "gpus": 1, "mem_mb": _mb(2 * table_gb + HOST_GB), "runtime": _min(embed_s),
        "work": f"{prompts} prompts x {T} tokens (worst case) / {EMBED_TOKENS_PER_S} tokens/s = "
                f"{embed_s / 60:.0f} min; states {prompts} x {T} x {d} x 2 B = {table_gb:.0f} GB, "
                f"held twice while embed_texts assembles them"}
    t = s["train"]
    train_rows = len(h["policies"]) * ckpts * bench // 2  # half of each checkpoint's held-out rows
    episodes = int(t["epochs"]) * math.ceil(train_rows / int(t["query_batch"]))
    train_s = episodes * EPISODE_S
    out["v0_table"] = {
        "gpus": 1, "mem_mb": _mb(table_gb + HOST_GB), "runtime": _min(train_s),
        "work": f"{t['epochs']} epochs x {train_rows} train rows / query batch {t['query_batch']} = "
                f"{episodes} episodes x {EPISODE_S} s = {train_s / 3600:.1f} h; the {table_gb:.0f} GB "
                "table in host memory (and on the GPU when it fits)"}
    from sparserl.values.v0.experiments import ABLATIONS
    abl_s = (len(ABLATIONS) - 1) * train_s  # the unchanged variant is read from v0_table
    out["v0_ablations"] = {**out["v0_table"], "runtime": _min(abl_s),
                           "work": f"{len(ABLATIONS) - 1} retrained variants x {train_s / 3600:.1f} h"}
    out["v0_routing"] = {"gpus": 0, "mem_mb": _mb(table_gb + HOST_GB), "runtime": 60,
                         "work": f"loads the {table_gb:.0f} GB table to mean-pool it; a small MF fit"}
    rollouts = ckpts * bench * int(h["k"])
    per_shard = math.ceil(ckpts / h["shards"]) * bench * int(h["k"])
    gen_s = per_shard * MEAN_RESPONSE_TOKENS / GEN_TOKENS_PER_S
    rule = "v0_harvest_values_shard" if h["shards"] > 1 else "v0_harvest_values"
    out[rule] = {"gpus": 1, "mem_mb": 0, "runtime": _min(gen_s),
                 "work": f"{rollouts} rollouts per policy ({ckpts} checkpoints x {bench} queries x "
                         f"k {h['k']}) / {h['shards']} shards = {per_shard} x {MEAN_RESPONSE_TOKENS} "
                         f"tokens / {GEN_TOKENS_PER_S} tokens/s = {gen_s / 3600:.1f} h"}
    if h["shards"] > 1:
        out["v0_harvest_merge"] = {"gpus": 0, "mem_mb": _mb(2), "runtime": 10,
                                   "work": f"{ckpts * bench} held-out rows and the on-policy rows"}
    return out
