"""Command-line targets no rule makes, named in one line with the targets that exist.

Snakemake 9.15 fails on a file target no rule makes with a raw `AttributeError: 'str' object has
no attribute 'is_storage'` (its MissingRuleException formats the target as a storage file) that
never names the target. `rl/<method>` for a method without a file in configs/methods/, or under a
config without an `rl` section, is such a target: no rule of that name exists, so Snakemake takes
it for a file. `check_targets` (called at the end of the Snakefile) checks every target once the
DAG is set up and before it is built, with the test Snakemake itself applies (`match_producers`).
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence

__all__ = ["check_targets", "unknown_target_message"]


def unknown_target_message(target: str, *, rules: Iterable[str], methods: Sequence[str] | None,
                           config_files: str, results: str) -> str:
    """What is wrong with `target` (no rule makes it) and the targets there are. `methods`: the
    names of the rl/<method> rules, None when the config has no rl section."""
    if target.startswith("rl/"):
        name = target[len("rl/"):]
        if methods is None:
            return (f"unknown target {target}: {config_files} has no rl section, so there are no "
                    "rl/<method> targets; add an rl section (as in configs/tiny.yaml) or run with "
                    "a config that has one")
        close = difflib.get_close_matches(name, methods, n=1)
        hint = f"did you mean rl/{close[0]}? " if close else ""
        return (f"unknown target {target}: there is no configs/methods/{name}.yaml; {hint}"
                f"the rl/<method> targets are: {', '.join('rl/' + m for m in methods)}")
    rules = list(rules)
    plain = sorted(r for r in rules if not r.startswith(("rl/", "figure_")))
    if methods is not None:
        plain.append("rl/<method> (one per configs/methods/*.yaml)")
    if any(r.startswith("figure_") for r in rules):
        plain.append("figure_<id> (`python -m sparserl figure --list`)")
    return (f"unknown target {target}: no rule makes it; ask for a rule ({', '.join(plain)}) "
            f"or a file under {results}/")


def check_targets(workflow, message: Callable[[str], str]) -> None:
    """Make `workflow` stop on a target no rule makes with `message(target)` as its one line,
    before Snakemake builds the DAG (and before it takes its lock)."""
    from snakemake_interface_common.exceptions import ApiError

    inner = workflow._prepare_dag

    def prepare_dag(*args, **kwargs):
        out = inner(*args, **kwargs)
        dag = workflow.dag
        for f in sorted(dag.targetfiles, key=str):
            if not dag.output_index.match_producers(f):
                # Snakemake prints an ApiError as one line, "Error: <message>"
                raise ApiError(message(str(f)))
        return out

    workflow._prepare_dag = prepare_dag  # each DAG operation (run, dry run, report) calls it
