"""What a DAG needs from this machine, checked in seconds before its first job: so a missing
bubblewrap fails at the start with one line, not after the world and pre-training jobs have run.

`problems(cfg, jobs)` takes the (rule, wildcards) of the jobs Snakemake is about to run and returns
one line per unmet prerequisite (empty when all hold). The Snakefile's `onstart` calls it;
`python -m sparserl preflight --config FILE` runs it for every job of a config."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Iterable

from sparserl.core.config import section_setting

# rules whose jobs run CodeIO's reference programs, and how to read their env from the wildcards
_SANDBOX_RULES = ("critique_start", "critique_train")


def sandboxed_envs(cfg: dict, jobs: Iterable[tuple[str, dict]] | None = None) -> list[str]:
    """The CodeIO envs (kind codeio, without sandbox.allow_weak) that these jobs grade with; every
    such env of the config when jobs is None."""
    crit = cfg.get("critique") or {}
    envs = crit.get("envs") or {}
    strict = {name for name, spec in envs.items()
              if isinstance(spec, dict) and spec.get("kind") == "codeio"
              and not section_setting(spec.get("sandbox"), "critique", "envs", name, "sandbox", "allow_weak")}
    if not strict:
        return []
    if jobs is None:
        return sorted(strict)
    exp_env = {name: (e or {}).get("env") for name, e in (crit.get("experiments") or {}).items()}
    used = set()
    for rule, wc in jobs:
        if rule not in _SANDBOX_RULES:
            continue
        env = wc.get("env") or exp_env.get(wc.get("exp", ""))
        if env in strict:
            used.add(env)
    return sorted(used)


def problems(cfg: dict, jobs: Iterable[tuple[str, dict]] | None = None,
             results: str | os.PathLike | None = None) -> list[str]:
    out = []
    if sys.version_info < (3, 11):
        out.append(f"Python {sys.version.split()[0]}: sparserl needs Python >= 3.11")
    if results is not None:
        out += _writable(results)
    envs = sandboxed_envs(cfg, jobs)
    if envs:
        from sparserl.envs.sandbox import strong_isolation
        ok, why = strong_isolation()
        if not ok:
            keys = ", ".join(f"critique.envs.{e}.sandbox.allow_weak" for e in envs)
            out.append(f"the CodeIO sandbox cannot give strong isolation here ({why}); fix: "
                       f"apt-get install bubblewrap util-linux libseccomp2 (docs/sandbox.md), or "
                       f"set {keys}: true to grade with the weak level")
    return out


def _writable(folder: str | os.PathLike) -> list[str]:
    """The results folder takes a file (a read-only mount or a full disk fails here, not mid-run)."""
    folder = os.fspath(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=".preflight-", dir=folder)
        try:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)
    except OSError as e:
        return [f"{folder}: cannot write there ({e.strerror}); fix: make it writable, free disk "
                f"space, or point `results_dir` elsewhere"]
    return []
