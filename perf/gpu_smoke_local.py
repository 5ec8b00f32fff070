"""The GPU smoke check's local parts (one piece of perf/gpu_smoke.py): the V0 embedder (hf and
policy kinds), V0 with its GP head (train + predict; TabPFN too when the package is there), the HF
rollout backend and the local trainer for 2 steps, on `cuda`; prints where each one's tensors and
parameters were. Needs only torch and transformers. Exits 1 if a part fails, 2 without CUDA.
    python perf/gpu_smoke_local.py                          # on the GPU machine, from the repo root
    SPARSERL_SMOKE_DEVICE=cpu python perf/gpu_smoke_local.py  # the same code on the CPU
"""
import os, sys, tempfile, time, traceback
from pathlib import Path

import torch

DEV = os.environ.get("SPARSERL_SMOKE_DEVICE", "cuda")
if DEV.startswith("cuda") and not torch.cuda.is_available():
    print(f"gpu_smoke: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}); "
          "run it on a GPU machine, or SPARSERL_SMOKE_DEVICE=cpu for a dry check", file=sys.stderr)
    sys.exit(2)
dev = torch.device(DEV)
print(f"gpu_smoke: device {dev}" + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""))
tmp = Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
results = []


def part(name):
    def wrap(fn):
        t0 = time.time()
        try:
            where = fn()
            results.append((name, "ok", where))
        except Exception as e:
            traceback.print_exc()
            results.append((name, "FAILED", f"{type(e).__name__}: {str(e)[:300]}"))
        print(f"[{time.time() - t0:6.1f} s] {name}: {results[-1][1]}  {results[-1][2]}", flush=True)
    return wrap


# a tiny policy in HF format: our BPE tokenizer and a random 2-layer Qwen3 (what the tests build)
from sparserl.models.policies import build_model, save_hf
from sparserl.models.tokenizer import train_tokenizer
texts = [f"Q: {a} + {b} =\nA: \\boxed{{{a + b}}}" for a in range(10) for b in range(10)]
tok = train_tokenizer(texts * 3, 120, tmp / "tokenizer", 24)
torch.manual_seed(0)
policy = tmp / "policy"
save_hf(build_model({"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 128},
                    tok, 64), tok, policy, {"gpu_smoke": True})


@part("V0 embedder (hf kind) + EmbeddingTable")
def _():
    from sparserl.values.v0.embedder import HFEmbedder, embed_texts
    e = HFEmbedder(policy, max_length=32, device=dev)
    t = embed_texts(e, list(range(40)), texts[:40], batch_size=16)
    assert t.states.shape[0] == 40 and torch.isfinite(t.states.float()).all()
    return f"model params on {next(e.model.parameters()).device}, table on {t.states.device}"


@part("V0 embedder (policy kind)")
def _():
    from sparserl.values.v0.embedder import PolicyEmbedder
    e = PolicyEmbedder(policy, device=dev)
    h, m = e.encode(texts[:8])
    return f"params on {next(e.lm.parameters()).device}, states {tuple(h.shape)} returned on {h.device}"


def _v0(head):
    import numpy as np, pandas as pd
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.experiments import _on_device
    from sparserl.values.v0.model import V0
    from sparserl.values.v0.settings import v0_settings
    from sparserl.values.v0.train import fit_v0, predict_v0
    g = torch.Generator().manual_seed(0)
    n = 96
    states = torch.randn(n, 12, 32, generator=g)
    y = (states[:, :, 0].mean(1) > 0).float()
    table = _on_device(EmbeddingTable([f"q{i}" for i in range(n)], states.half(), torch.ones(n, 12, dtype=torch.bool), "toy"),
                       dev, print)
    role = np.array(["context"] * 64 + ["train"] * 16 + ["test"] * 16)
    tl = pd.DataFrame({"model": "a", "step": 0, "query_id": table.ids, "value": y.numpy(), "role": role})
    s = v0_settings(None, head=head, train={"epochs": 2, "context": 64, "query_batch": 8, "batch_size": 2})
    m = V0(32, {"n_static": 12, "d_attn": 24, "d_residual": 16}, s["head"], "toy").to(dev)
    fit_v0(m, table, tl, s, 0)
    p = predict_v0(m, table, tl, tl[tl.role == "test"], s, 0)["p"]
    assert np.isfinite(p).all()
    return f"adapter on {m.device}, head on {next(m.head.parameters()).device}, states on {table.states.device}"


part("V0 adapter + GP head: fit 2 epochs, predict")(lambda: _v0({"kind": "gp"}))


@part("V0 adapter + TabPFN head (random v2.5 checkpoint)")
def _():
    try:
        import tabpfn  # noqa: F401
    except ImportError:
        return "skipped: the tabpfn package is not installed here"
    from sparserl.values.v0.heads import make_random_tabpfn_checkpoint
    return _v0({"kind": "tabpfn", "model_path": str(make_random_tabpfn_checkpoint(tmp / "tabpfn.ckpt"))})


@part("HF rollout backend: 4 prompts x n=2, 8 new tokens")
def _():
    # the backend has no device setting: the policy is moved to the device and torch's default
    # device is set, so every tensor it makes lands there too
    from sparserl.rollout import SamplingParams
    from sparserl.rollout.hf import HFBackend
    b = HFBackend(policy, batch_size=8)
    b.model.to(dev)
    with torch.device(dev):
        out = b.generate([t.split("A:")[0] + "A:" for t in texts[:4]], 2,
                         SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0), seed=0)
    return f"model on {next(b.model.parameters()).device}, {len(out.texts)} rollouts"


@part("local trainer: grpo_g4, 2 steps, hf backend")
def _():
    # the local trainer has no device setting either: run under torch's default device
    from sparserl.core.artifacts import write_table
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.engines.local.trainer import Trainer
    from sparserl.methods.run import resolve_run
    from sparserl.tasks import procedural
    cfg = load_config("configs/smoke.yaml", {
        "results_dir": str(tmp / "results"),
        "rl": {"policy": "s", "methods": ["grpo_g4"], "seeds": [0], "steps": 2, "rollouts_per_step": 16,
               "lr": 1e-4, "checkpoint_every": 2, "eval_fractions": [], "mini_batches": 2,
               "lr_tuning": {"enabled": False}},
        "rollout": {"backend": "hf", "max_new_tokens": 8}})
    P = Paths(cfg)
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    import shutil
    shutil.copytree(policy, P.policy("s"))
    with torch.device(dev):
        t = Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
        final = t.run()
    where = sorted({str(p.device) for p in t.model.parameters()})
    return f"params on {where}, {t.step} steps, final checkpoint {final}"


import shutil
shutil.rmtree(tmp, ignore_errors=True)
heavy = [m for m in ("vllm", "ray", "deepspeed", "snakemake") if m in sys.modules]
print("\ngpu_smoke summary (device %s)%s" % (dev, f"; imported {heavy}" if heavy else ""))
for name, status, where in results:
    print(f"  {status:6s} {name}: {where}")
sys.exit(0 if all(s == "ok" for _, s, _ in results) else 1)
