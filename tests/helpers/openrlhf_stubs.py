"""Import-only placeholders for the CUDA-only packages OpenRLHF imports (vllm, flash_attn).

OpenRLHF 0.11.2's advantage, sampling, loss and CLI code runs on CPU once `vllm` and `flash_attn`
(and the submodules it imports from them) exist in sys.modules. Each placeholder is a plain
`types.ModuleType` with a real `__spec__` (a MagicMock breaks transformers' import checks); the
names OpenRLHF imports from them are placeholders that raise if anything calls them, except
`vllm.SamplingParams`, which records its keyword arguments (the OSLA tests read them).

Placeholders go in only where the real package is absent, and `remove()` takes them out again,
so the rest of the test suite never sees them.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


class SamplingParams:
    """Stand-in for vllm.SamplingParams: keeps the keyword arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        for k, v in kwargs.items():
            setattr(self, k, v)


def _unavailable(name):
    def fn(*_a, **_k):
        raise RuntimeError(f"{name} is a CPU test placeholder (the real package is CUDA-only)")
    fn.__name__ = name.rsplit(".", 1)[-1]
    return fn


# module -> attributes OpenRLHF imports from it
PLACEHOLDERS = {
    "vllm": {"SamplingParams": SamplingParams, "__version__": "0.29.0"},
    "vllm.inputs": {"TokensPrompt": dict},
    "vllm.utils": {"random_uuid": _unavailable("vllm.utils.random_uuid")},
    "vllm.distributed": {},
    "vllm.distributed.utils": {"StatelessProcessGroup": _unavailable("StatelessProcessGroup")},
    "vllm.distributed.device_communicators": {},
    "vllm.distributed.device_communicators.pynccl": {"PyNcclCommunicator": _unavailable("PyNcclCommunicator")},
    "flash_attn": {"__version__": "2.8.3"},
    "flash_attn.bert_padding": {n: _unavailable(f"flash_attn.bert_padding.{n}")
                                for n in ("index_first_axis", "pad_input", "rearrange", "unpad_input")},
    "flash_attn.utils": {},
    "flash_attn.utils.distributed": {"all_gather": _unavailable("flash_attn.utils.distributed.all_gather")},
}


def _real(top: str) -> bool:
    mod = sys.modules.get(top)
    if mod is not None:
        return not getattr(mod, "__sparserl_placeholder__", False)
    return importlib.util.find_spec(top) is not None


def install() -> list[str]:
    """Put the placeholders into sys.modules (only for packages that are not installed)."""
    added = []
    for name, attrs in PLACEHOLDERS.items():
        top = name.split(".")[0]
        if _real(top) or name in sys.modules:
            continue
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        mod.__path__ = []
        mod.__sparserl_placeholder__ = True
        for k, v in attrs.items():
            setattr(mod, k, v)
        sys.modules[name] = mod
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, mod)
        added.append(name)
    return added


def remove(names) -> None:
    for name in names:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__sparserl_placeholder__", False):
            del sys.modules[name]


def missing_requirements() -> list[str]:
    """The OpenRLHF pieces the tests need that are not installed."""
    need = ["openrlhf", "ray", "deepspeed", "peft", "torchdata", "pylatexenc", "datasets", "aiohttp"]
    return [n for n in need if importlib.util.find_spec(n) is None]


def skip_without_openrlhf() -> None:
    """Skip the calling test module (at import) when the OpenRLHF CPU install is absent."""
    import pytest
    missing = missing_requirements()
    if missing:
        pytest.skip(f"OpenRLHF CPU test install absent ({', '.join(missing)} missing): "
                    "pip install -e '.[test]' && pip install --no-deps openrlhf==0.11.2",
                    allow_module_level=True)


def imported(modules: dict):
    """Generator for a module-scoped fixture: the modules {attr: dotted name} imported with the
    vllm/flash_attn placeholders as a namespace; placeholders and our patches (`hooks`) removed
    afterwards."""
    import importlib
    from types import SimpleNamespace
    added = install()
    mods = SimpleNamespace()
    try:
        for attr, name in modules.items():
            setattr(mods, attr, importlib.import_module(name))
        yield mods
    finally:
        from sparserl.engines.openrlhf import hooks
        hooks.unregister("patches")
        remove(added)


def argv_flags(argv) -> dict:
    """An OpenRLHF argument list as {flag: value}: one value as a string, several as a list, none
    as True (the tests' view of what `launcher.openrlhf_argv` built)."""
    out, key = {}, None
    for a in argv:
        if a.startswith("--"):
            key = a[2:]
            out[key] = []
        else:
            out[key].append(a)
    return {k: (v[0] if len(v) == 1 else (v or True)) for k, v in out.items()}


def restore_patches_after(monkeypatch) -> None:
    """What the worker hook (`patches.install_patches`) changes in this process, put back when the
    test ends: module attributes, wrapped methods of imported modules, sys.meta_path."""
    from sparserl.engines.openrlhf.patches import METHOD_PATCHES, PATCHES, ray_actor_classes
    for modname, attrs in PATCHES.items():
        mod = sys.modules.get(modname)
        for a in attrs if mod is not None else ():
            monkeypatch.setattr(mod, a, getattr(mod, a))
    for modname, attrs in METHOD_PATCHES.items():
        mod = sys.modules.get(modname)
        for a in attrs if mod is not None else ():
            cls, name = getattr(mod, a.split(".")[0]), a.split(".")[1]
            for c in [cls, *ray_actor_classes(mod, cls, name)]:
                monkeypatch.setattr(c, name, c.__dict__[name])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))


def openrlhf_run(out):
    """The OpenRLHF run whose final model is `out`: its files in out's parent, absolute (what
    `openrlhf-args`/`openrlhf-launch --out` resolve, `methods.run.resolve_run(root=...)`)."""
    from pathlib import Path

    from sparserl.core.paths import RunPaths
    return RunPaths(Path(out).absolute().parent, "run", 0, engine="openrlhf")
