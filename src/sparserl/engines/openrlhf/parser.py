"""OpenRLHF's train_ppo_ray argument parser, rebuilt with our estimator names.

OpenRLHF builds its parser inline under ``if __name__ == "__main__":`` of
`openrlhf/cli/train_ppo_ray.py` and hard-codes the ``choices`` of ``--algo.advantage.estimator``.
`build_parser` reads that file's source (found with importlib, NOT imported: no vLLM needed),
executes the parser-building statements of the block as they are, then widens the choices (our
registry names, token-level ones included; ``gpg`` for ``--actor.policy_loss_type``) and adds
``--sparserl.*``. `finalize_args` executes the block's own post-parse statements (hierarchize +
validation) on our namespace, everything except the closing ``train(args)``. So the flags, defaults
and checks are always those of the installed OpenRLHF; one exception: OpenRLHF keeps a critic only
for ``--algo.advantage.estimator gae``, and a Le Critique spec with tether/evpo gets it back.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import os
import sys
from datetime import datetime
from pathlib import Path

from sparserl.engines.openrlhf import OPENRLHF_VERSION

TRAIN_SCRIPT = ("cli", "train_ppo_ray.py")


def openrlhf_root() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "openrlhf is not installed: pip install -e \".[openrlhf-cpu]\" && "
            f"pip install --no-deps openrlhf=={OPENRLHF_VERSION} (cluster: pip install 'openrlhf[vllm]=={OPENRLHF_VERSION}')")
    return Path(list(spec.submodule_search_locations)[0])


def _main_block(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            return node.body
    raise RuntimeError("openrlhf/cli/train_ppo_ray.py has no `if __name__ == '__main__':` block; "
                       f"this launcher is written against OpenRLHF {OPENRLHF_VERSION}")


def _is_parse_args(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "parse_args")


def _is_train_call(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "train")


def _split_main(source_path: Path) -> tuple[list[ast.stmt], list[ast.stmt]]:
    body = _main_block(ast.parse(source_path.read_text(), filename=str(source_path)))
    cut = next((i for i, s in enumerate(body) if _is_parse_args(s)), None)
    if cut is None:
        raise RuntimeError(f"{source_path}: no `args = parser.parse_args()` in its __main__ block")
    post = [s for s in body[cut + 1:] if not _is_train_call(s)]
    return body[:cut], post


def _exec(stmts: list[ast.stmt], namespace: dict, source_path: Path) -> dict:
    mod = ast.fix_missing_locations(ast.Module(body=stmts, type_ignores=[]))
    exec(compile(mod, str(source_path), "exec"), namespace)  # OpenRLHF's own statements
    return namespace


def _find_action(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    for a in parser._actions:
        if a.dest == dest:
            return a
    raise KeyError(f"OpenRLHF's parser has no argument {dest!r} (version drift? expected {OPENRLHF_VERSION})")


def our_estimators() -> list[str]:
    """Every registry name, token-level ones (gae, tether, tether_bucketed, evpo) included."""
    from sparserl.estimators import list_estimators
    return list_estimators(level=None)


def build_parser(source_path: Path | None = None) -> argparse.ArgumentParser:
    """OpenRLHF's train_ppo_ray parser with our estimator names, ``gpg``, and ``--sparserl.*``."""
    source_path = source_path or openrlhf_root().joinpath(*TRAIN_SCRIPT)
    pre, _ = _split_main(source_path)
    ns = _exec(pre, {"argparse": argparse, "datetime": datetime, "os": os, "__name__": "__openrlhf_args__"},
               source_path)
    parser: argparse.ArgumentParser = ns["parser"]
    parser.prog = "openrlhf train_ppo_ray (sparserl)"
    est = _find_action(parser, "algo.advantage.estimator")
    est.choices = list(est.choices) + [n for n in our_estimators() if n not in est.choices]
    loss = _find_action(parser, "actor.policy_loss_type")
    loss.choices = list(loss.choices) + [n for n in ("gpg",) if n not in loss.choices]
    parser.add_argument("--sparserl.method", type=str, default=None, help="sparserl method name")
    parser.add_argument("--sparserl.spec", type=str, default=None,
                        help="the method spec as JSON (read by the experience maker and OSLA sampler)")
    parser.add_argument("--sparserl.run_dir", type=str, default=None,
                        help="the run's directory (harvested rollouts are appended under it)")
    parser.add_argument("--sparserl.seed", type=int, default=0, help="seed of the live prior's context sampling")
    parser.add_argument("--sparserl.resume_step", type=int, default=None,
                        help="the checkpoint step this attempt resumes after (set by openrlhf-launch)")
    parser.add_argument("--sparserl.hf_steps", type=int, nargs="*", default=None,
                        help="global steps saved besides every --ckpt.save_steps, the only ones with an HF copy "
                             "(the evaluated checkpoints; engines.openrlhf.checkpoints); unset: OpenRLHF's rule")
    parser.add_argument("--sparserl.vllm_kl_max", type=float, default=None,
                        help="fail a step whose |vllm_kl| passes this (a stale or broken weight sync); <= 0: off")
    parser.add_argument("--sparserl.v0_model", type=str, default=None, help="the trained V0 (prior kind 'v0')")
    parser.add_argument("--sparserl.v0_pool", type=str, default=None,
                        help="the run's training pool (its RunInputs.pool), which the V0 actor embeds when "
                             "--sparserl.v0_embeddings is missing")
    parser.add_argument("--sparserl.v0_embeddings", type=str, default=None,
                        help="V0's embeddings of the run's pool (its RunInputs.v0_embeddings); without "
                             "--sparserl.config, a prebuilt EmbeddingTable loaded as it is")
    from sparserl.core.config import v0_actor_settings
    d = v0_actor_settings({})  # the schema's defaults (rl.openrlhf.v0_*)
    parser.add_argument("--sparserl.v0_gpus", type=float, default=d["v0_gpus"],
                        help="share of one GPU of the V0 prior actor in the colocated placement group")
    parser.add_argument("--sparserl.v0_threads", type=int, default=d["v0_threads"], help="CPU threads of the V0 prior actor")
    parser.add_argument("--sparserl.v0_timeout_s", type=float, default=d["v0_timeout_s"],
                        help="seconds one V0 prior query may take")
    parser.add_argument("--sparserl.v0_start_timeout_s", type=float, default=d["v0_start_timeout_s"],
                        help="seconds for the V0 prior actor to be placed and start")
    parser.add_argument("--sparserl.config", type=str, default=None,
                        help="the run's config files (JSON list): the V0 actor reads the pool and v0.embedder")
    return parser


def finalize_args(namespace: argparse.Namespace, source_path: Path | None = None):
    """OpenRLHF's own post-parse code on `namespace` (hierarchize + validation), minus train()."""
    source_path = source_path or openrlhf_root().joinpath(*TRAIN_SCRIPT)
    _, post = _split_main(source_path)

    def _no_train(*_a, **_k):  # defensive: a train() call nested elsewhere must not run here
        raise RuntimeError("finalize_args must not start training")

    critic_path = vars(namespace).get("critic.model_name_or_path")
    with contextlib.redirect_stdout(sys.stderr):  # OpenRLHF prints its warnings; keep stdout clean
        ns = _exec(post, {"args": namespace, "os": os, "train": _no_train, "__name__": "__openrlhf_args__"},
                   source_path)
    args = ns["args"]
    if _spec_trains_critic(args) and args.critic.model_name_or_path is None:
        # OpenRLHF drops the critic for every estimator but "gae"; tether/evpo need it too
        args.critic.model_name_or_path = critic_path or args.actor.model_name_or_path
    return args


def _spec_trains_critic(args) -> bool:
    """The --sparserl.spec names a token-level estimator with a critic (Le Critique)."""
    import json
    raw = getattr(getattr(args, "sparserl", None), "spec", None)
    if not raw:
        return False
    d = json.loads(raw) if isinstance(raw, str) else dict(raw)
    from sparserl.estimators import list_estimators
    return d.get("critic") is not None and d.get("estimator") in list_estimators("token")


def parse_args(argv: list[str], source_path: Path | None = None):
    """argv -> OpenRLHF's hierarchical args, validated by OpenRLHF's own checks."""
    parser = build_parser(source_path)
    return finalize_args(parser.parse_args(argv), source_path)
