"""`python -m sparserl provenance A B`: are two artifacts' bytes expected to match? Compares their
manifests (config hash, commit, and the `machine` record: ISA path, BLAS, threads, versions;
sparserl.core.machine) and lists what differs. A and B are two artifacts (or their manifests),
or two results folders, whose manifests are paired by path.

    sparserl provenance results/tiny/policies/s results_other/tiny/policies/s
    sparserl provenance results/tiny results_other/tiny       # every artifact of both trees

Exit status 0 when every pair is expected equal, 1 otherwise (a difference, a missing record).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

EXAMPLES = 3  # artifacts named per line of a folder comparison


def _read(mp: Path) -> dict:
    try:
        m = json.loads(mp.read_text())
    except ValueError as e:
        raise ValueError(f"{mp}: not a JSON manifest ({e}); rerun the rule that writes its "
                         "artifact") from None
    if not isinstance(m, dict):
        raise ValueError(f"{mp}: not a manifest (a JSON object); rerun the rule that writes its artifact")
    return m


def load(path: str | Path) -> tuple[str, dict[str, dict]]:
    """("artifact" | "tree", {name: manifest}) of an artifact, a manifest or a results folder."""
    from sparserl.core.artifacts import MANIFEST_SUFFIX, manifest_path
    p = Path(path)
    if p.name.endswith(MANIFEST_SUFFIX) and p.is_file():
        return "artifact", {p.name[: -len(MANIFEST_SUFFIX)]: _read(p)}
    if manifest_path(p).is_file():
        return "artifact", {p.name: _read(manifest_path(p))}
    if p.is_dir():
        found = {str(mp.relative_to(p))[: -len(MANIFEST_SUFFIX)]: mp
                 for mp in sorted(p.rglob("*" + MANIFEST_SUFFIX))
                 if not any(part.startswith(".") for part in mp.relative_to(p).parts)}
        if found:
            return "tree", {k: _read(mp) for k, mp in found.items()}
    raise FileNotFoundError(f"{p}: no manifest ({manifest_path(p).name}) beside it and none under it; "
                            "give an artifact, its .manifest.json or a results folder")


def _pair_report(a: dict, b: dict) -> tuple[bool | None, list[str]]:
    from sparserl.core.machine import compare
    equal, diffs, notes = compare(a, b)
    if equal:
        lines = [("expected equal: same config, commit, ISA path (torch CPU capability, CPU flags, "
                  "BLAS kernels), thread counts and versions")]
    elif equal is None:
        lines = ["unknown: the manifests do not record enough to say"]
    else:
        lines = [f"not expected equal ({len(diffs)} difference{'s' * (len(diffs) != 1)}):"]
        lines += ["  " + d for d in diffs]
    if notes:
        lines.append("notes:")
        lines += ["  " + n for n in notes]
    return equal, lines


def _tree_report(ta: dict[str, dict], tb: dict[str, dict]) -> tuple[bool, list[str]]:
    from sparserl.core.machine import compare
    both = sorted(set(ta) & set(tb))
    verdicts: dict[str, list[str]] = defaultdict(list)
    diffs: dict[str, list[str]] = defaultdict(list)
    notes: dict[str, list[str]] = defaultdict(list)
    for name in both:
        equal, d, n = compare(ta[name], tb[name])
        verdicts[{True: "expected equal", False: "not expected equal", None: "unknown"}[equal]].append(name)
        for line in d:
            diffs[line].append(name)
        for line in n:
            notes[line].append(name)

    def named(names: list[str]) -> str:
        more = f", ... {len(names) - EXAMPLES} more" if len(names) > EXAMPLES else ""
        return f"[{len(names)}: {', '.join(names[:EXAMPLES])}{more}]"

    lines = [f"{k}: {len(verdicts[k])} of {len(both)} artifacts"
             for k in ("expected equal", "not expected equal", "unknown") if verdicts[k]]
    if diffs:
        lines.append("differences:")
        lines += [f"  {d}  {named(names)}" for d, names in diffs.items()]
    if notes:
        lines.append("notes:")
        lines += [f"  {n}  {named(names)}" for n, names in notes.items()]
    for side, only in (("A", sorted(set(ta) - set(tb))), ("B", sorted(set(tb) - set(ta)))):
        if only:
            lines.append(f"in {side} only (not compared): {named(only)}")
    ok = bool(both) and len(verdicts["expected equal"]) == len(both)
    return ok, lines


def cmd_provenance(args):
    (ka, ma), (kb, mb) = load(args.a), load(args.b)
    print(f"A: {args.a}\nB: {args.b}")
    if ka != kb:
        raise SystemExit(f"sparserl provenance: {args.a if ka == 'tree' else args.b} is a folder and "
                         "the other an artifact; give two artifacts or two results folders")
    if ka == "artifact":
        equal, lines = _pair_report(next(iter(ma.values())), next(iter(mb.values())))
    else:
        equal, lines = _tree_report(ma, mb)
    print("\n".join(lines))
    return 0 if equal else 1


def register(sub, add) -> None:
    p = sub.add_parser("provenance", help="are two artifacts' (or two results folders') bytes expected "
                       "to match? compares their manifests' config, commit and machine numerics")
    p.add_argument("a", help="an artifact, its .manifest.json, or a results folder")
    p.add_argument("b", help="the same for the other run")
    p.set_defaults(fn=cmd_provenance)
