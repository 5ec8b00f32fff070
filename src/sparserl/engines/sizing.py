"""Sizing of the paper DAG's GPU jobs from first principles, and the SLURM asks that cover them.

Every GPU rule of the paper DAG has an estimator in `ESTIMATORS` (rule -> job wildcards -> `Estimate`).
Two kinds of numbers, kept apart:
- assumed: GPU datasheet figures (`GPUS`), model shapes (`HF_CONFIGS`, the models' config.json),
  response lengths, efficiency factors, overheads. Named constants below; none is measured: no GPU
  run of the paper scale has been made.
- derived: KV bytes per token, decode rate, generation and training time, storage, and each job's
  ask (`Estimate.ask_minutes` = estimate x MARGIN).

Decode is memory-bound: a decode step reads the weights once for the whole batch plus every running
sequence's KV cache, so generation time = (decode steps x weight bytes + sum over sequences of the
KV bytes of each context) / achieved bandwidth. An RL step waits for its longest response: at least
max_new_tokens sequential steps (x OSLA's rounds), whatever the batch. tests/workflow/test_paper_resources.py
checks each job of the paper dry run against its estimate; docs/cluster.md's table is `sizing_table`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from sparserl.core.config import openrlhf_shape, schema_default, section_setting, setting, start_samples
from sparserl.core.paths import Paths
from sparserl.engines.openrlhf.checkpoints import save_plan
from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
from sparserl.engines.openrlhf.flags import hf_steps, save_steps
from sparserl.envs.world import heldout_eval

MARGIN = 1.5  # runtime (and memory) asked / estimated


# =========================================================================== assumed: hardware

@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bytes_per_s: float
    memory_bytes: float
    bf16_flops: float  # dense tensor-core peak
    source: str


GPUS = {
    "H100": GPU("H100 SXM5 80 GB", 3.35e12, 80e9, 989e12,
                "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 3.35 TB/s HBM3, 80 GB, 989 TFLOPS BF16 dense"),
    "H200": GPU("H200 SXM 141 GB", 4.8e12, 141e9, 989e12,
                "NVIDIA H200 Tensor Core GPU datasheet, SXM: 4.8 TB/s HBM3e, 141 GB, 989 TFLOPS BF16 dense"),
    "A100": GPU("A100 SXM4 80 GB", 2.039e12, 80e9, 312e12,
                "NVIDIA A100 Tensor Core GPU datasheet, SXM4 80GB: 2,039 GB/s HBM2e, 80 GB, 312 TFLOPS BF16"),
}
DEFAULT_GPU = "H100"  # config `sizing.gpu` overrides it


# =========================================================================== assumed: model shapes

# config.json fields of each hub model the paper DAG loads (as published on the Hugging Face hub);
# a local copy's own config.json (models/<org>/<name>/config.json) is read instead when present.
_QWEN3_4B = {"num_hidden_layers": 36, "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True,
             "torch_dtype": "bfloat16"}
HF_CONFIGS = {
    "Qwen/Qwen3-4B-Instruct-2507": _QWEN3_4B,
    "Qwen/Qwen3-4B-Thinking-2507": _QWEN3_4B,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": {
        "num_hidden_layers": 28, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2,
        "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "Qwen/Qwen2.5-7B-Instruct": {
        "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
        "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    # stand-in: Qwen3.5-4B mixes linear-attention layers (less KV than this); Qwen3-4B's full
    # attention bounds its decode cost from above
    "Qwen/Qwen3.5-4B": _QWEN3_4B,
    "Qwen/Qwen3-Embedding-0.6B": {
        "num_hidden_layers": 28, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151669, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"},
}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    dtype_bytes: int = 2

    @classmethod
    def from_hf_config(cls, c: dict) -> "ModelShape":
        heads = int(c["num_attention_heads"])
        return cls(layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]), heads=heads,
                   kv_heads=int(c.get("num_key_value_heads", heads)),
                   head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
                   intermediate=int(c["intermediate_size"]), vocab=int(c["vocab_size"]),
                   tied=bool(c.get("tie_word_embeddings", False)),
                   dtype_bytes=DTYPE_BYTES[str(c.get("torch_dtype", "bfloat16"))])

    @property
    def params(self) -> int:
        """Weights (biases and norms left out: < 0.1%)."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attn + mlp) + self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer: 2 x layers x KV heads x head dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def attn_flops_per_token(self, context: float) -> float:
        """Forward attention score and value FLOPs of one token against `context` tokens."""
        return 4.0 * self.layers * self.heads * self.head_dim * context


def model_shape(hf_name: str, local_dir: str | Path | None = None) -> ModelShape:
    """The model's shape from its local config.json when there, else `HF_CONFIGS`."""
    if local_dir is not None and (Path(local_dir) / "config.json").is_file():
        c = json.loads((Path(local_dir) / "config.json").read_text())
        return ModelShape.from_hf_config(c.get("text_config", c))
    if hf_name not in HF_CONFIGS:
        from sparserl.core.config import ConfigError
        raise ConfigError(f"sparserl/engines/sizing.py: no shape for model {hf_name!r}; add its config.json "
                          "fields to HF_CONFIGS (or place its copy with config.json under models/)")
    return ModelShape.from_hf_config(HF_CONFIGS[hf_name])


# =========================================================================== assumed: workload, efficiency

PROMPT_TOKENS = 300             # a DAPO prompt with the chat template
RESPONSE_FRACTION = 0.5         # instruct models: mean response = half the cap
REASONING_FRACTION = 0.9        # thinking / R1-distilled models run near the cap
REASONING_MARKERS = ("Thinking", "R1-Distill")
HBM_EFFICIENCY = 0.75           # achieved / datasheet bandwidth of a vLLM decode step
PREFILL_MFU = 0.4               # achieved / peak BF16 FLOPs of prefill
TRAIN_MFU = 0.2                 # ZeRO-3 + gradient checkpointing + packing on RL-length sequences
VLLM_RESERVED_BYTES = 4e9       # per engine: activations, CUDA graphs, sampler
RL_STEP_OVERHEAD_S = 30         # per RL step: vLLM wake/sleep, weight broadcast, Ray round trips
ENGINE_START_S = 180            # per model a job loads: vLLM start, weights from the shared disk
CKPT_WRITE_BYTES_PER_S = 1e9    # one job's write rate to the shared filesystem
ADAM_BYTES_PER_PARAM = 14       # DeepSpeed resume state: bf16 weights + fp32 master + two fp32 moments
RESUME_EVERY_S = 4 * 3600       # [our choice] most work a killed long run may lose (critique_train)

# held-out benchmark sizes (problems) of configs/paper.yaml
BENCHMARK_SIZES = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva_math": 272,
                   "olympiadbench": 675, "hmmt_feb_2025": 30}
DAPO_PROMPTS = 17_398           # DAPO-Math-17k's distinct prompts
# BASIS Table 2's harnesses: (items, prompt tokens, generation cap) per task family [lm-eval 0.4.13's
# task sizes; prompt lengths of 5-shot MMLU-Pro CoT and the chat-templated rest are assumed]
OOD_TASKS = {"mmlu_pro": (12_032, 3_000, 2_048), "mgsm": (11 * 250, 600, 1_024), "ifeval": (541, 300, 1_280),
             "humaneval": (164, 300, 768), "mbpp": (378, 300, 768)}

# V0's non-decode work (carried over from its first sizing)
EMBED_TOKENS_PER_S = 15_000     # a 0.6B encoder in float32 on one GPU (~18 TFLOP/s at 1.2 GFLOP/token)
EPISODE_S = 0.04                # one V0 episode (context 256 + 8 queries) forward + backward on one GPU
HOST_GB = 8                     # python, torch, the model weights and the harvest table


# =========================================================================== derived: lengths, decode, training

@dataclass(frozen=True)
class Lengths:
    """Response tokens, uniform on [lo, cap] with the given mean (the longest reaches the cap)."""
    cap: int
    mean: float

    @property
    def lo(self) -> float:
        return max(0.0, 2 * self.mean - self.cap)

    @property
    def second_moment(self) -> float:
        lo, hi = self.lo, self.cap
        return (lo * lo + lo * hi + hi * hi) / 3


def response_lengths(hf_name: str, cap: int) -> Lengths:
    frac = REASONING_FRACTION if any(m in hf_name for m in REASONING_MARKERS) else RESPONSE_FRACTION
    return Lengths(int(cap), frac * int(cap))


def decode_context(L: Lengths, prompt: int = PROMPT_TOKENS) -> float:
    """Token-weighted mean context during decode: prompt + E[L^2] / (2 E[L])."""
    return prompt + L.second_moment / (2 * L.mean)


def kv_capacity(shape: ModelShape, gpu: GPU, mem_util: float, tp: int = 1) -> float:
    """KV bytes one engine's GPU holds: its memory share less its weight shard and reserve."""
    cap = gpu.memory_bytes * mem_util - shape.weight_bytes / tp - VLLM_RESERVED_BYTES
    if cap <= 0:
        from sparserl.core.config import ConfigError
        raise ConfigError(f"sparserl/engines/sizing.py: {gpu.name} at gpu_memory_utilization {mem_util} leaves no "
                          f"KV cache beside {shape.weight_bytes / 1e9:.0f} GB of weights; raise the "
                          "utilisation or tensor_parallel_size")
    return cap


def decode_tokens_per_s(shape: ModelShape, gpu: GPU, context: float, mem_util: float = 0.85, tp: int = 1) -> float:
    """Steady decode rate of one engine with its KV cache full at `context` tokens a sequence (per engine)."""
    kv_tok = shape.kv_bytes_per_token / tp
    batch = kv_capacity(shape, gpu, mem_util, tp) / (kv_tok * context)
    step_s = (shape.weight_bytes / tp + batch * context * kv_tok) / (gpu.hbm_bytes_per_s * HBM_EFFICIENCY)
    return batch / step_s


def generation_s(shape: ModelShape, gpu: GPU, sequences: float, L: Lengths, *, prompt: int = PROMPT_TOKENS,
                 engines: int = 1, tp: int = 1, mem_util: float = 0.85, rounds: int = 1) -> float:
    """Seconds to generate `sequences` responses over `engines` engines (each tp GPUs).

    Decode steps per engine = max(rounds x cap: the longest response of each sequential round,
    tokens / the concurrent sequences its KV cache holds). Bytes read = steps x weight shard +
    each sequence's KV over its own decode. Prefill is compute-bound and added."""
    per = sequences / engines
    w = shape.weight_bytes / tp
    kv_tok = shape.kv_bytes_per_token / tp
    concurrent = kv_capacity(shape, gpu, mem_util, tp) / (kv_tok * decode_context(L, prompt))
    steps = max(rounds * L.cap, per * L.mean / concurrent)
    read = steps * w + per * kv_tok * (prompt * L.mean + L.second_moment / 2)
    decode = read / (gpu.hbm_bytes_per_s * HBM_EFFICIENCY)
    prefill = 2.0 * shape.params / tp * per * prompt / (gpu.bf16_flops * PREFILL_MFU)
    return decode + prefill


def train_s(shape: ModelShape, gpu: GPU, gpus: int, sequences: float, L: Lengths, *, prompt: int = PROMPT_TOKENS,
            reference: bool = False, critic: bool = False, policy: bool = True) -> float:
    """Seconds of one RL step's training forward/backward passes on `gpus` GPUs.

    Per token: policy fwd + bwd + checkpoint recompute (4 forwards) + the old log-prob forward,
    a reference forward with a KL term, a critic (a policy copy) the same 4 forwards + its value forward."""
    tokens = sequences * (prompt + L.mean)
    fwd = 2.0 * shape.params + shape.attn_flops_per_token((prompt + L.mean) / 2)
    forwards = (5 if policy else 1) + (1 if reference else 0) + (5 if critic else 0)
    return tokens * forwards * fwd / (gpus * gpu.bf16_flops * TRAIN_MFU)


# =========================================================================== estimates

@dataclass
class Estimate:
    rule: str
    job: str              # the job's wildcards, "" for a one-job rule
    gpus: int
    seconds: float
    work: str             # the arithmetic, one line
    storage_bytes: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def ask_minutes(self) -> int:
        return int(math.ceil(self.seconds * MARGIN / 60))


def gpu_of(cfg: dict) -> GPU:
    name = (cfg.get("sizing") or {}).get("gpu", DEFAULT_GPU)
    if name not in GPUS:
        from sparserl.core.config import ConfigError
        raise ConfigError(f"sizing.gpu: {name!r} is not a known GPU; use one of {sorted(GPUS)}")
    return GPUS[name]


def _hf_name(cfg: dict, ref: str) -> str:
    return cfg["policies"][ref].get("hf_name") or ref  # a pretrained policy: its config.json's shape


def _policy(P: Paths, ref: str) -> tuple[str, ModelShape]:
    """A policy's hub name and shape, read from its checkpoint in tree `P` when there."""
    hf = _hf_name(P.cfg, ref)
    return hf, model_shape(hf, P.policy(ref))


def _h(s: float) -> str:
    return f"{s / 3600:.1f} h"


def _openrlhf_default(key: str):
    """An rl.openrlhf OpenRLHF flag's schema default (the cluster profile, `flags.cluster_defaults`)."""
    return schema_default("rl", "openrlhf", key)


def _openrlhf_shape(cfg: dict, over: dict | None = None) -> dict:
    """GPUs, engines and tensor parallelism of an OpenRLHF job (flags.openrlhf_flags' reading)."""
    over = openrlhf_shape(over)
    nodes, gpn, tp = int(over["nodes"]), int(over["gpus_per_node"]), int(over["vllm.tensor_parallel_size"])
    engines = int(over.get("vllm.num_engines", max(1, nodes * gpn // tp)))
    util = float(over.get("vllm.gpu_memory_utilization", _openrlhf_default("vllm.gpu_memory_utilization")))
    return {"gpus": nodes * gpn, "engines": engines, "tp": tp, "mem_util": util}


def rl_storage_bytes(shape: ModelShape, saves: int, *, hf_copies: int, kept: int, critic: bool) -> float:
    """Disk a run holds at its end: its HF checkpoints (never pruned; the evaluated steps'
    `hf_copies`) + final/, and `kept` DeepSpeed resume states (ckpt.max_num) of the actor, and of
    the critic when there is one (its trainer state beside them is small: the FIFO's few batches)."""
    ds = min(saves, kept) * ADAM_BYTES_PER_PARAM * shape.params * (2 if critic else 1)
    return (hf_copies + 1) * shape.weight_bytes + ds


def rl_run_estimate(rule: str, job: str, shape: ModelShape, gpu: GPU, *, steps: int, warmup: int, rollouts: float,
                    rounds: int, L: Lengths, prompt: int, osh: dict, reference: bool, critic: bool,
                    save_steps: int, hf_steps: list, save_hf: bool, kept: int, eval_s: float = 0.0,
                    note: str = "") -> Estimate:
    """One OpenRLHF run: (warm-up + policy) steps of generation, training and overhead, plus saves
    (`checkpoints.save_plan`: every `save_steps` and at `hf_steps`, the only steps with an HF copy)."""
    gen = generation_s(shape, gpu, rollouts, L, prompt=prompt, engines=osh["engines"], tp=osh["tp"],
                       mem_util=osh["mem_util"], rounds=rounds)
    tr = train_s(shape, gpu, osh["gpus"], rollouts, L, prompt=prompt, reference=reference, critic=critic)
    warm_tr = train_s(shape, gpu, osh["gpus"], rollouts, L, prompt=prompt, critic=True, policy=False) if warmup else 0
    step = gen + tr + RL_STEP_OVERHEAD_S
    total_steps = steps + warmup
    saves = len(save_plan(total_steps, save_steps, hf_steps)) if save_steps > 0 else 0
    hf_copies = len([g for g in hf_steps if g <= total_steps]) if save_hf else 0
    save_s = (saves * ADAM_BYTES_PER_PARAM * shape.params * (2 if critic else 1)
              + hf_copies * shape.weight_bytes) / CKPT_WRITE_BYTES_PER_S
    total = steps * step + warmup * (gen + warm_tr + RL_STEP_OVERHEAD_S) + save_s + ENGINE_START_S + eval_s
    work = (f"{steps} steps{f' + {warmup} critic warm-up' if warmup else ''} x (generation {gen:.0f} s "
            f"[{rollouts:.0f} rollouts, {rounds} x {L.cap} sequential decode steps, mean {L.mean:.0f} tokens] "
            f"+ training {tr:.0f} s + {RL_STEP_OVERHEAD_S} s) + {saves} saves {save_s / 60:.0f} min"
            f"{f' + evaluation {eval_s / 60:.0f} min' if eval_s else ''} = {_h(total)} on {osh['gpus']} GPUs{note}")
    return Estimate(rule, job, osh["gpus"], total, work,
                    rl_storage_bytes(shape, saves, hf_copies=hf_copies, kept=kept, critic=critic),
                    extra={"step_s": step, "saves": saves, "save_steps": save_steps, "hf_copies": hf_copies})


def osla_rounds(method) -> int:
    """OSLA's sequential rounds at most: round 0 at k_init, then +k_step until k_max."""
    o = method.osla
    return 1 + math.ceil((o.k_max - o.k_init) / o.k_step)


def resume_every(step_s: float) -> int:
    """Steps between resume points: at most RESUME_EVERY_S of estimated work apart."""
    return max(1, int(RESUME_EVERY_S // step_s))


def _rl_cluster_run(cfg: dict, m, policy_dir: str | Path) -> dict:
    """The pieces of an rl_cluster run's estimate (`_rl_cluster`, `rl_resume_save_steps`);
    `policy_dir`: the start policy's checkpoint (its config.json, when there, gives the shape)."""
    from sparserl.methods.spec import prompts_per_step
    rl = cfg["rl"]
    hf = _hf_name(cfg, rl["policy"])
    shape = model_shape(hf, policy_dir)
    cap = int(rl.get("max_new_tokens") or cfg["rollout"]["max_new_tokens"])
    B = prompts_per_step(m, int(rl["rollouts_per_step"]))
    rollouts, rounds = B * m.group_size, 1
    if m.osla is not None:
        rounds = osla_rounds(m)
        rollouts = m.osla.max_rollouts_per_step or B * m.osla.k_max
    return {"shape": shape, "L": response_lengths(hf, cap), "rollouts": rollouts, "rounds": rounds,
            "osh": _openrlhf_shape(cfg, rl.get("openrlhf"))}


def rl_resume_save_steps(cfg: dict, method, policy_dir: str | Path) -> int:
    """ckpt.save_steps of an rl_cluster run (`flags.save_steps`): a resume point at least every
    RESUME_EVERY_S of estimated work (default GPU); its evaluated steps are saved besides.
    `policy_dir`: the run's start policy (`_rl_cluster_run`)."""
    p = _rl_cluster_run(cfg, method, policy_dir)
    gpu = gpu_of(cfg)
    gen = generation_s(p["shape"], gpu, p["rollouts"], p["L"], prompt=PROMPT_TOKENS, engines=p["osh"]["engines"],
                       tp=p["osh"]["tp"], mem_util=p["osh"]["mem_util"], rounds=p["rounds"])
    tr = train_s(p["shape"], gpu, p["osh"]["gpus"], p["rollouts"], p["L"], prompt=PROMPT_TOKENS,
                 reference=method.kl_coef > 0, critic=method.critic is not None)
    return resume_every(gen + tr + RL_STEP_OVERHEAD_S)


def _rl_cluster(P: Paths, w: dict, gpu: GPU, rule: str = "rl_cluster") -> Estimate:
    from sparserl.methods.spec import load_method, total_steps
    cfg = P.cfg
    rl = cfg["rl"]
    m = load_method(w["method"])
    policy_dir = P.policy(rl["policy"])
    p = _rl_cluster_run(cfg, m, policy_dir)
    W = critic_warmup_steps(m)
    return rl_run_estimate(rule, f"method={w['method']}, seed={w['seed']}", p["shape"], gpu, steps=total_steps(rl, m),
                           warmup=W, rollouts=p["rollouts"], rounds=p["rounds"], L=p["L"], prompt=PROMPT_TOKENS,
                           osh=p["osh"], reference=m.kl_coef > 0, critic=m.critic is not None,
                           save_steps=save_steps(rl, m, rl_resume_save_steps(cfg, m, policy_dir)),
                           hf_steps=hf_steps(rl, m), save_hf=bool(_openrlhf_default("ckpt.save_hf")),
                           kept=int(_openrlhf_default("ckpt.max_num")))


def critique_step(cfg: dict, exp: str, method_name: str, gpu: GPU, policy_dir: str | Path) -> dict:
    """The pieces of a Le Critique run's estimate (also its resume cadence, `critique_save_steps`);
    `policy_dir`: the experiment's start policy (`CritiquePaths.policy`: a hub model's local copy)."""
    from sparserl.engines.openrlhf.experiment import run_method, settings
    from sparserl.envs.world import experiment
    s, e = settings(cfg, exp), experiment(cfg, exp)
    m = run_method(cfg, exp, method_name)
    hf = e.policy_hub or cfg["critique"]["policy_hub"]
    shape = model_shape(hf, policy_dir)
    # multi-turn: the trajectory's generated tokens bound the sequential decode steps
    L = response_lengths(hf, int(s["max_len"]) - PROMPT_TOKENS)
    L = Lengths(L.cap, min(L.mean, RESPONSE_FRACTION * L.cap))
    osh = _openrlhf_shape(cfg, s.get("openrlhf"))
    rollouts = int(s["rollouts_per_step"])
    gen = generation_s(shape, gpu, rollouts, L, engines=osh["engines"], tp=osh["tp"], mem_util=osh["mem_util"])
    tr = train_s(shape, gpu, osh["gpus"], rollouts, L, reference=m.kl_coef > 0, critic=m.critic is not None)
    ev = generation_s(shape, gpu, eval_rollouts(s), L,
                      engines=osh["engines"], tp=osh["tp"], mem_util=osh["mem_util"])
    return {"m": m, "s": s, "shape": shape, "L": L, "osh": osh, "rollouts": rollouts, "gen": gen, "train": tr,
            "eval": ev, "warmup": critic_warmup_steps(m), "step_s": gen + tr + RL_STEP_OVERHEAD_S}


def critique_save_steps(cfg: dict, exp: str, method_name: str, policy_dir: str | Path) -> int:
    """ckpt.save_steps of a Le Critique run: a resume point at least every RESUME_EVERY_S of
    estimated work (default GPU), whatever the critic's warm-up; `policy_dir` as `critique_step`."""
    return resume_every(critique_step(cfg, exp, method_name, gpu_of(cfg), policy_dir)["step_s"])


def _critique_train(P: Paths, w: dict, gpu: GPU) -> Estimate:
    cfg, policy_dir = P.cfg, P.critique.policy(w["exp"])
    p = critique_step(cfg, w["exp"], w["method"], gpu, policy_dir)
    return rl_run_estimate("critique_train", f"exp={w['exp']}, method={w['method']}, seed={w['seed']}", p["shape"],
                           gpu, steps=int(p["s"]["steps"]), warmup=p["warmup"], rollouts=p["rollouts"], rounds=1,
                           L=p["L"], prompt=PROMPT_TOKENS, osh=p["osh"], reference=p["m"].kl_coef > 0,
                           critic=p["m"].critic is not None,
                           save_steps=critique_save_steps(cfg, w["exp"], w["method"], policy_dir), hf_steps=[],
                           save_hf=False,
                           kept=int(_openrlhf_default("ckpt.max_num")), eval_s=p["eval"])


def eval_rollouts(s: dict) -> int:
    """Rollouts of a Le Critique run's held-out evaluation: problems x samples (critique.rl.eval)."""
    problems, samples = heldout_eval(s)
    return problems * samples


def _one_gpu_generation(cfg: dict, rule: str, job: str, hf: str, shape: ModelShape, gpu: GPU, rollouts: float,
                        cap: int, *, models: int = 1, prompt: int = PROMPT_TOKENS, what: str = "") -> Estimate:
    v = cfg["rollout"].get("vllm") or {}
    L = response_lengths(hf, cap)
    gen = generation_s(shape, gpu, rollouts, L, prompt=prompt, tp=int(section_setting(v, "rollout", "vllm", "tensor_parallel_size")),
                       mem_util=float(section_setting(v, "rollout", "vllm", "gpu_memory_utilization")))
    total = gen + models * ENGINE_START_S
    rate = rollouts * L.mean / gen
    return Estimate(rule, job, 1, total, f"{what}{rollouts:.0f} rollouts x {L.mean:.0f} tokens / {rate:,.0f} tokens/s "
                                         f"+ {models} model load(s) = {_h(total)}")


def _bench_problems(cfg: dict) -> int:
    return sum(BENCHMARK_SIZES.get(b, 500) for b in cfg["tasks"]["benchmarks"])


def _evaluate(P: Paths, w: dict, gpu: GPU) -> Estimate:
    cfg = P.cfg
    hf, shape = _policy(P, w["policy"])
    k = int(cfg["evaluation"]["default"]["k"])
    if (cfg.get("rl") or {}).get("policy") == w["policy"]:  # the start policy draws evaluation.start_k
        k = max(k, start_samples(cfg))
    n = _bench_problems(cfg)
    return _one_gpu_generation(cfg, "evaluate", f"policy={w['policy']}", hf, shape, gpu, n * k,
                               int(cfg["rollout"]["max_new_tokens"]), what=f"{n} problems x k {k} = ")


def _rl_eval(P: Paths, w: dict, gpu: GPU) -> Estimate:
    cfg = P.cfg
    hf, shape = _policy(P, cfg["rl"]["policy"])
    k = int(cfg["evaluation"]["default"]["k"])
    n, ck = _bench_problems(cfg), len(cfg["rl"].get("eval_fractions", [])) + 1
    return _one_gpu_generation(cfg, "rl_eval", f"method={w['method']}, seed={w['seed']}", hf, shape, gpu, ck * n * k,
                               int(cfg["rollout"]["max_new_tokens"]), models=ck,
                               what=f"{ck} checkpoints x {n} problems x k {k} = ")


def _reference_cache_shard(P: Paths, w: dict, gpu: GPU) -> Estimate:
    cfg = P.cfg
    b = cfg["basis"]
    K = int(setting(cfg, "basis", "reference_shards"))
    hf, shape = _policy(P, w["policy"])
    per = math.ceil(DAPO_PROMPTS * int(b["reference_n"]) / K)
    return _one_gpu_generation(cfg, "reference_cache_shard", f"policy={w['policy']}, shard={w['shard']}", hf, shape,
                               gpu, per, int(cfg["rollout"]["max_new_tokens"]),
                               what=f"{DAPO_PROMPTS} prompts x {b['reference_n']} / {K} shards = ")


def _critique_start(P: Paths, w: dict, gpu: GPU) -> Estimate:
    from sparserl.engines.openrlhf.experiment import settings
    from sparserl.envs.world import experiments
    cfg = P.cfg
    exps = [e for e in experiments(cfg) if e.env == w["env"]]
    secs, parts = 0.0, []
    for e in exps:  # the start policy of each experiment on the env's held-out problems
        s = settings(cfg, e.name)
        hf = e.policy_hub or cfg["critique"]["policy_hub"]
        shape = model_shape(hf, P.critique.policy(e.name))
        est = _one_gpu_generation(cfg, "critique_start", "", hf, shape, gpu,
                                  eval_rollouts(s),
                                  int(s["max_len"]) - PROMPT_TOKENS)
        secs += est.seconds
        parts.append(f"{e.name}: {est.work}")
    return Estimate("critique_start", f"env={w['env']}", 1, secs, "; ".join(parts))


def _ood(P: Paths, w: dict, gpu: GPU, rule: str) -> Estimate:
    cfg = P.cfg
    hf, shape = _policy(P, cfg["rl"]["policy"])
    if rule == "ood_lm_eval":
        tasks = ["mmlu_pro", "mgsm", "ifeval"]
    else:
        tasks = [w["dataset"]]
    secs, parts = 0.0, []
    for t in tasks:
        n, prompt, cap = OOD_TASKS[t]
        e = _one_gpu_generation(cfg, rule, "", hf, shape, gpu, n, cap, prompt=prompt, models=1)
        secs += e.seconds
        parts.append(f"{t}: {e.work}")
    job = ", ".join(f"{k}={v}" for k, v in w.items())
    return Estimate(rule, job, 1, secs, "; ".join(parts))


# --------------------------------------------------------------------------- V0

# rule -> the `resources` group of configs/<scale>.yaml it takes (workflow/rules/values.smk)
V0_RESOURCES = {
    "v0_pool_embeddings": "v0_embed", "v0_embeddings": "v0_embed",
    "v0_table": "v0_train", "v0_ablations": "v0_ablations",
    "v0_routing": "v0_cpu", "v0_harvest_values_shard": "rollout", "v0_harvest_values": "rollout",
    "v0_harvest_merge": "cpu_small",
}


def _mb(gb: float) -> int:
    return int(math.ceil(gb * MARGIN * 1024))


def _min(seconds: float) -> int:
    return int(math.ceil(seconds * MARGIN / 60))


def _v0_harvest_shard(P: Paths, w: dict, gpu: GPU) -> Estimate:
    from sparserl.engines.harvest_settings import checkpoint_steps, harvest_settings
    cfg = P.cfg
    h = harvest_settings(cfg)
    ckpts = len(checkpoint_steps(h)) + 1
    per_ckpts = math.ceil(ckpts / h["shards"])
    hf, shape = _policy(P, w["policy"])
    n = _bench_problems(cfg)
    rule = "v0_harvest_values_shard" if h["shards"] > 1 else "v0_harvest_values"
    return _one_gpu_generation(cfg, rule, ", ".join(f"{k}={v}" for k, v in w.items()), hf, shape, gpu,
                               per_ckpts * n * int(h["k"]), int(cfg["rollout"]["max_new_tokens"]), models=per_ckpts,
                               what=f"{per_ckpts} of {ckpts} checkpoints x {n} queries x k {h['k']} = ")


def _v0_harvest_run(P: Paths, w: dict, gpu: GPU) -> Estimate:
    from sparserl.engines.harvest_settings import harvest_config, harvest_settings
    from sparserl.methods.spec import load_method, prompts_per_step, total_steps
    cfg = P.cfg
    h = harvest_settings(cfg)
    hc = harvest_config(cfg, w["policy"])
    rl, m = hc["rl"], load_method(h["method"])
    hf, shape = _policy(P, w["policy"])
    cap = int(rl.get("max_new_tokens") or cfg["rollout"]["max_new_tokens"])
    rollouts = prompts_per_step(m, int(rl["rollouts_per_step"])) * m.group_size
    return rl_run_estimate("v0_harvest_run", f"policy={w['policy']}", shape, gpu, steps=total_steps(rl, m), warmup=0,
                           rollouts=rollouts, rounds=1, L=response_lengths(hf, cap), prompt=PROMPT_TOKENS,
                           osh=_openrlhf_shape(cfg, rl.get("openrlhf")), reference=m.kl_coef > 0, critic=False,
                           save_steps=save_steps(rl, m), hf_steps=hf_steps(rl, m), save_hf=True,
                           kept=int(_openrlhf_default("ckpt.max_num")))


def v0_rule_estimates(P: Paths) -> dict:
    """V0's rules in tree `P`: {rule: {"gpus", "mem_mb", "runtime" (minutes, margin included),
    "work"}}; the harvest's avg@k from the decode model (its slowest policy), the rest from V0's own constants."""
    from sparserl.engines.harvest_settings import checkpoint_steps, harvest_settings
    from sparserl.values.v0.settings import v0_settings
    cfg = P.cfg
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
                f"held twice while embed_texts assembles them", "seconds": embed_s}
    t = s["train"]
    train_rows = len(h["policies"]) * ckpts * bench // 2  # half of each checkpoint's held-out rows
    episodes = int(t["epochs"]) * math.ceil(train_rows / int(t["query_batch"]))
    train_secs = episodes * EPISODE_S
    out["v0_table"] = {
        "gpus": 1, "mem_mb": _mb(table_gb + HOST_GB), "runtime": _min(train_secs), "seconds": train_secs,
        "work": f"{t['epochs']} epochs x {train_rows} train rows / query batch {t['query_batch']} = "
                f"{episodes} episodes x {EPISODE_S} s = {train_secs / 3600:.1f} h; the {table_gb:.0f} GB "
                "table in host memory (and on the GPU when it fits)"}
    from sparserl.values.v0.experiments import ABLATIONS
    abl_s = (len(ABLATIONS) - 1) * train_secs  # the unchanged variant is read from v0_table
    out["v0_ablations"] = {**out["v0_table"], "runtime": _min(abl_s), "seconds": abl_s,
                           "work": f"{len(ABLATIONS) - 1} retrained variants x {train_secs / 3600:.1f} h"}
    out["v0_routing"] = {"gpus": 0, "mem_mb": _mb(table_gb + HOST_GB), "runtime": 60, "seconds": 40 * 60,
                         "work": f"loads the {table_gb:.0f} GB table to mean-pool it; a small MF fit"}
    gpu = gpu_of(cfg)
    shard = max((_v0_harvest_shard(P, {"policy": p, "shard": 0}, gpu) for p in h["policies"]),
                key=lambda e: e.seconds)
    out[shard.rule] = {"gpus": 1, "mem_mb": 0, "runtime": _min(shard.seconds), "seconds": shard.seconds,
                       "work": f"{shard.job}: {shard.work}"}
    if h["shards"] > 1:
        out["v0_harvest_merge"] = {"gpus": 0, "mem_mb": _mb(2), "runtime": 10, "seconds": 300,
                                   "work": f"{ckpts * bench} held-out rows and the on-policy rows"}
    return out


def _v0_rule(rule: str):
    def est(P: Paths, w: dict, gpu: GPU) -> Estimate:
        e = v0_rule_estimates(P)[rule]
        return Estimate(rule, ", ".join(f"{k}={v}" for k, v in w.items()), e["gpus"], e["seconds"], e["work"])
    return est


# rule -> (the tree's Paths, wildcards, GPU) -> Estimate: one entry for every GPU rule of the paper DAG
ESTIMATORS = {
    "rl_cluster": _rl_cluster,
    "rl_eval": _rl_eval,
    "evaluate": _evaluate,
    "reference_cache_shard": _reference_cache_shard,
    "critique_train": _critique_train,
    "critique_start": _critique_start,
    "ood_lm_eval": lambda P, w, gpu: _ood(P, w, gpu, "ood_lm_eval"),
    "ood_evalplus": lambda P, w, gpu: _ood(P, w, gpu, "ood_evalplus"),
    "v0_harvest_run": _v0_harvest_run,
    "v0_harvest_values_shard": _v0_harvest_shard,
    "v0_harvest_values": _v0_harvest_shard,
    "v0_embeddings": _v0_rule("v0_embeddings"),
    "v0_pool_embeddings": _v0_rule("v0_pool_embeddings"),
    "v0_table": _v0_rule("v0_table"),
    "v0_ablations": _v0_rule("v0_ablations"),
}


def estimate(P: Paths, rule: str, wildcards: dict, gpu: str | None = None) -> Estimate:
    """The estimate of one GPU job of tree `P` (the DAG's; `wildcards` as Snakemake gives them)."""
    if rule not in ESTIMATORS:
        raise KeyError(f"sparserl/engines/sizing.py: GPU rule {rule!r} has no estimate; add one to ESTIMATORS "
                       "(its work from the model's shape and the job's rollouts)")
    return ESTIMATORS[rule](P, dict(wildcards), GPUS[gpu] if gpu else gpu_of(P.cfg))


# =========================================================================== the paper DAG's jobs and the table

def parse_dry_run(text: str) -> list[dict]:
    """Jobs of `snakemake -n` output: [{"rule", "local", "wildcards", "resources", "block"}]."""
    import re
    jobs = []
    for b in text.split("\n\n"):
        m = re.search(r"^(local)?rule (\w+):", b, re.M)
        if not m:
            continue
        res = re.search(r"resources: (.*)", b)
        res = dict(kv.split("=", 1) for kv in res.group(1).split(", ")) if res else {}
        wc = re.search(r"wildcards: (.*)", b)
        wc = dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {}
        jobs.append({"rule": m.group(2), "local": bool(m.group(1)), "wildcards": wc, "resources": res, "block": b})
    return jobs


def dry_run_jobs(repo: str | Path, workdir: str | Path, configfiles: list | None = None) -> list[dict]:
    """The paper DAG's jobs, as `snakemake --profile slurm -n all` plans them from `repo`."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "snakemake", "-s", str(Path(repo) / "Snakefile"), "-d", str(workdir),
           "--profile", "slurm", "-n", "all"]
    if configfiles:
        cmd += ["--configfile", *map(str, configfiles)]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"snakemake dry run failed:\n{out.stderr[-3000:]}")
    return parse_dry_run(out.stdout + out.stderr)


def gpu_job_estimates(P: Paths, jobs: list[dict], gpu: str | None = None) -> list[tuple[dict, Estimate]]:
    """(job, estimate) of every job that asks for a GPU."""
    return [(j, estimate(P, j["rule"], j["wildcards"], gpu)) for j in jobs
            if int(j["resources"].get("gpu") or 0)]  # a Snakemake job's resources, not a config key


def sizing_table(P: Paths, jobs: list[dict]) -> str:
    """Markdown: per GPU rule, its jobs, the slowest job's estimate at each GPU type, x MARGIN, and the ask."""
    rows = ["| rule | jobs | GPUs | slowest job | " + " | ".join(f"estimate {g}" for g in GPUS)
            + f" | x {MARGIN} ({gpu_of(P.cfg).name.split()[0]}) | asks |", "|---|---:|---:|---|" + "---:|" * (len(GPUS) + 2)]
    by: dict[str, list] = {}
    for j, e in gpu_job_estimates(P, jobs):
        by.setdefault(j["rule"], []).append((j, e))
    for rule in sorted(by):
        j, e = max(by[rule], key=lambda je: (round(je[1].seconds), je[1].job))  # ties: the same job every run
        per_gpu = [estimate(P, rule, j["wildcards"], g).seconds for g in GPUS]
        asks = sorted({int(x["resources"]["runtime"]) for x, _ in by[rule]})
        rows.append(f"| `{rule}` | {len(by[rule])} | {e.gpus} | {e.job or '-'} | "
                    + " | ".join(_h(s) for s in per_gpu)
                    + f" | {e.ask_minutes / 60:.1f} h | {'/'.join(f'{a / 60:.0f}' for a in asks)} h |")
    return "\n".join(rows)


def storage_table(P: Paths, jobs: list[dict]) -> str:
    """Markdown: checkpoint storage each OpenRLHF rule's runs hold at their end, per run and in all."""
    rows = ["| rule | runs | resume point every (steps) | HF copies a run | per run | in all |",
            "|---|---:|---|---|---:|---:|"]
    total = 0.0
    for rule in ("rl_cluster", "critique_train", "v0_harvest_run"):
        est = [estimate(P, rule, j["wildcards"]) for j in jobs if j["rule"] == rule]
        if not est:
            continue
        s = sum(e.storage_bytes for e in est)
        total += s
        lo, hi = min(e.storage_bytes for e in est), max(e.storage_bytes for e in est)
        every = sorted({e.extra["save_steps"] for e in est})
        hf = sorted({e.extra["hf_copies"] + 1 for e in est})  # + final/
        rows.append(f"| `{rule}` | {len(est)} | {', '.join(map(str, every))} | {', '.join(map(str, hf))} | "
                    f"{lo / 1e9:,.0f}-{hi / 1e9:,.0f} GB | {s / 1e12:.1f} TB |")
    rows.append(f"| all | | | | | {total / 1e12:.1f} TB |")
    return "\n".join(rows)
