"""`python -m sparserl config show`: the resolved config, each value with where it came from.

    sparserl config show --config configs/small.yaml configs/overlays/small_v0.yaml
    sparserl config show --config configs/tiny.yaml --set rl.steps=20 --key rl.

A value comes from the last layer that sets it (`sparserl.core.config.load_layers`, the layers
load_config merges): a config file, a `--set key=value` (typed by the schema, as Snakemake's
`--config` is), or `default`: the schema's `default:` (core/config.schema.yaml). Defaults the
config does not set are listed too, marked `default`: the value code reads through
`core.config.setting`.
"""
from __future__ import annotations

import json


def origins(files: list[str], sets: list[str]) -> tuple[dict, list[tuple[str, object, str]]]:
    """(the resolved config, [(dotted key, value, where it came from)] for every leaf of it and
    every schema default it leaves unset)."""
    from sparserl.core.config import DEFAULT_LAYER, _leaves, default_leaves, load_layers, merge_layers
    overrides = {}
    for s in sets:
        key, sep, value = s.partition("=")
        if not sep or not key:
            raise SystemExit(f"config show: --set {s!r}: give key=value, e.g. rl.steps=20")
        overrides[key] = value
    layers = load_layers(files, overrides, command_line=True)
    cfg = merge_layers(layers)
    set_by = {}
    for name, data in layers:  # later layers win, as in the merge
        for dotted, _ in _leaves(data):
            set_by[dotted] = name
    rows = []
    for dotted, value in _leaves(cfg):
        where = set_by.get(dotted)
        if where is None:  # a leaf set as part of a list or mapping a layer wrote whole
            parents = [k for k in set_by if dotted.startswith(k + ".")]
            where = set_by[max(parents, key=len)] if parents else DEFAULT_LAYER
        rows.append((dotted, value, where))
    shown = {dotted for dotted, _, _ in rows}
    for keys, value in default_leaves(cfg):
        dotted = ".".join(map(str, keys))
        # unset: no leaf of cfg at or under it, and no value of cfg above it (a list, a scalar)
        if dotted in shown or any(k.startswith(dotted + ".") or dotted.startswith(k + ".") for k in shown):
            continue
        rows.append((dotted, value, DEFAULT_LAYER))
    rows.sort(key=lambda r: _order(r[0], cfg))
    return cfg, rows


def _order(dotted: str, cfg: dict) -> tuple:
    """Sort key: the config's own key order, a default after the keys the config sets beside it."""
    out, node = [], cfg
    for k in dotted.split("."):
        keys = list(node) if isinstance(node, dict) else []
        out.append(keys.index(k) if k in keys else len(keys))
        node = node.get(k) if isinstance(node, dict) else None
    return tuple(out)


def cmd_config_show(args):
    _, rows = origins(args.config, args.set or [])
    rows = [r for r in rows if r[0].startswith(args.key or "")]
    if not rows:
        raise SystemExit(f"config show: no key starts with {args.key!r}")
    width = min(48, max(len(k) for k, _, _ in rows))
    for key, value, where in rows:
        text = json.dumps(value, default=str)
        if len(text) > 120 and isinstance(value, list):  # a run list: its head and its length
            text = text[:100].rsplit(", ", 1)[0] + f", ...] ({len(value)} items)"
        print(f"{key:{width}s}  {text}  [{where}]")
    return 0


def register(sub, add) -> None:
    p = sub.add_parser("config", help="the resolved config: `config show` prints each value with its origin")
    psub = p.add_subparsers(dest="action", required=True)
    q = psub.add_parser("show", help="every value of the resolved config and where it came from (a file, "
                        "--set, or the schema's default), the schema defaults it leaves unset included")
    q.add_argument("--config", nargs="+", default=["configs/tiny.yaml"],
                   help="config file(s), merged in order (default: configs/tiny.yaml)")
    q.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="overrides, as Snakemake's --config takes them")
    q.add_argument("--key", default="", help="only keys starting with this prefix, e.g. rl.")
    q.set_defaults(fn=cmd_config_show)
