"""One post-import hook for the OpenRLHF engine: callbacks that run when a module is imported.

Our changes to OpenRLHF, vLLM and torch (`cpu_shims`: CUDA-free stand-ins; `patches`: our
classes and method wrappers) must reach modules a process imports later, in the driver, every Ray
worker and vLLM's engine processes, without a fork. Each is a callback registered here per module
name; a single finder on ``sys.meta_path`` (`PostImportFinder`) wraps the loader of a registered
module so that, when the module executes:

  around-exec  callbacks wrap the execution itself, ``fn(exec_module, module)`` (the flash_attn
               stub that `cpu_shims` shows openrlhf.models.ring_attn_utils while it imports);
               a lower order is outermost;
  after-exec   callbacks then run with the executed module, ``fn(module)``, lowest order first.

Orders: `SHIMS` (0) before `PATCHES` (10): OpenRLHF's module is made to run without CUDA first,
then our classes go in (they may import OpenRLHF modules that need the shims). A callback
registered for a module that is already imported runs at once, and every after-exec callback of a
higher order registered before it runs again after it, so the end state is the documented order
whatever the order of registration and import; callbacks must therefore be idempotent (ours are:
each sets attributes, or wraps OpenRLHF's original method once). Registering the same (module,
key) again replaces the callback. Processes that never import a registered module pay nothing.
"""
from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable

SHIMS = 0  # cpu_shims: OpenRLHF / vLLM / torch without CUDA
PATCHES = 10  # patches: our classes and method wrappers

# module -> key -> (order, callback)
_AFTER: dict[str, dict[str, tuple[int, Callable[[Any], Any]]]] = {}
_AROUND: dict[str, dict[str, tuple[int, Callable[[Callable[[], None], Any], None]]]] = {}


def _ordered(table: dict, name: str) -> list[tuple[int, str, Callable]]:
    return sorted((order, key, fn) for key, (order, fn) in table.get(name, {}).items())


def after_import(module: str, key: str, fn: Callable[[Any], Any], order: int) -> Any:
    """Run ``fn(module)`` right after `module` executes (module doc). When it is imported already:
    runs it now, then the higher-order callbacks registered before it again; returns fn's result
    (None when the module is not imported yet)."""
    _AFTER.setdefault(module, {})[key] = (int(order), fn)
    mod = sys.modules.get(module)
    if mod is None:
        return None
    out = fn(mod)
    for o, k, f in _ordered(_AFTER, module):
        if o > order and k != key:
            f(mod)
    return out


def around_exec(module: str, key: str, fn: Callable[[Callable[[], None], Any], None], order: int) -> None:
    """Run `module`'s execution inside ``fn(exec_module, module)`` (module doc); fn must call
    exec_module() once. No effect on a module imported already."""
    _AROUND.setdefault(module, {})[key] = (int(order), fn)


def run_exec(name: str, exec_module: Callable[[], None], module) -> None:
    """Execute a registered module: its around-exec callbacks (lowest order outermost), then its
    after-exec callbacks (lowest order first)."""
    run = exec_module
    for _o, _k, fn in reversed(_ordered(_AROUND, name)):
        run = (lambda f, inner: lambda: f(inner, module))(fn, run)
    run()
    for _o, _k, fn in _ordered(_AFTER, name):
        fn(module)


class _HookedLoader(importlib.abc.Loader):
    """Wraps a registered module's real loader (`run_exec` around its exec_module)."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        run_exec(module.__name__, lambda: self._loader.exec_module(module), module)

    def __getattr__(self, name):  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """The one sys.meta_path entry: finds a registered module with the other finders and wraps
    its loader; None for every other module."""

    sparserl_hooks = True  # how `install` recognises one (also an instance of a reloaded module's class)

    def find_spec(self, fullname, path, target=None):
        if fullname not in _AFTER and fullname not in _AROUND:
            return None
        for finder in sys.meta_path:
            if getattr(finder, "sparserl_hooks", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _HookedLoader):
                    spec.loader = _HookedLoader(spec.loader)
                return spec
        return None


def install() -> PostImportFinder:
    """Put the finder first on sys.meta_path, once per process (idempotent); returns it."""
    for f in sys.meta_path:
        if getattr(f, "sparserl_hooks", False):
            return f
    finder = PostImportFinder()
    sys.meta_path.insert(0, finder)
    return finder


def unregister(key: str) -> None:
    """Drop every callback registered under `key` (what a module already executed keeps stays)."""
    for table in (_AFTER, _AROUND):
        for name in list(table):
            table[name].pop(key, None)
            if not table[name]:
                del table[name]


def registered(module: str) -> list[tuple[str, int, str]]:
    """(phase, order, key) of `module`'s callbacks in the order they run."""
    return ([("around", o, k) for o, k, _ in _ordered(_AROUND, module)]
            + [("after", o, k) for o, k, _ in _ordered(_AFTER, module)])


__all__ = ["PATCHES", "SHIMS", "PostImportFinder", "after_import", "around_exec", "install", "registered", "run_exec",
           "unregister"]
