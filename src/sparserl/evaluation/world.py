"""The world report: does RL have room in this world, and where?

For each policy it names (`world.policies`, default the RL start policy), on the RL pool and on
every benchmark:
- greedy accuracy (one rollout per problem),
- sampled accuracy at temperature 1.0, top-p 1.0 (`world.samples` rollouts per problem),
- accuracy under the benchmark's evaluation protocol (mean@k, top-p 0.7 by default),
and the overlap between the pre-training corpus, the RL pool and the benchmarks (distinct problems
shared, corpus rows that are pool problems). The gap between greedy and sampled accuracy on the
held-out problems is the room that RL's sharpening has; a pool inside the corpus means RL
rehearses what pre-training already taught.

It also reports the share of held-out problems whose greedy answer is wrong (`greedy_wrong`;
in world 2.0, `tasks.world`, split by slip and other templates, sparserl.tasks.worked) and the
answer lengths in tokens, EOS included: the corpus targets per level (`corpus_answer_tokens`) and
the sampled responses (`mean_response_tokens` per set).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_json
from sparserl.core.config import rollout_max_new_tokens, section_setting, setting
from sparserl.core.logs import get_logger
from sparserl.evaluation.evaluate import per_prompt_rates, protocol_for
from sparserl.grading.verifier import open_verifier
from sparserl.rollout import SamplingParams, make_backend, rollout
from sparserl.tasks import corpus_targets, format_prompt, worked

log = get_logger(__name__)


def overlap(pool: Path, corpus: Path | None, benchmarks: list) -> dict:
    """Distinct problems of the corpus, the pool and each benchmark, and what they share."""
    pool = set(read_table(pool)["problem"])
    out: dict = {"pool_problems": len(pool)}
    corpus = read_table(corpus)["problem"] if corpus is not None and Path(corpus).exists() else None
    if corpus is not None:
        cset = set(corpus)
        out.update({
            "corpus_rows": int(len(corpus)), "corpus_problems": len(cset),
            "pool_in_corpus": len(pool & cset),
            "pool_in_corpus_share": len(pool & cset) / max(len(pool), 1),
            "corpus_rows_from_pool_share": float(corpus.isin(pool).mean()),
            "corpus_repeats_per_problem": float(len(corpus) / max(len(cset), 1)),
        })
    benches = {}
    for path in benchmarks:
        probs = set(read_table(path)["problem"])
        benches[Path(path).stem] = {"problems": len(probs), "in_pool": len(probs & pool),
                      "in_corpus": None if corpus is None else len(probs & cset)}
    out["benchmarks"] = benches
    return out


def _rates(backend, cfg, df, params, k, seed, ver) -> tuple[np.ndarray, float]:
    """(pass rate per problem, mean response tokens) of k rollouts per problem."""
    prompts = [format_prompt(cfg, p, getattr(backend, "tokenizer", None)) for p in df["problem"]]
    batch = rollout(backend, prompts, list(df["answer"]), k, params, seed, ver)
    succ, n = per_prompt_rates(batch, len(df))
    return succ / n, float(batch.response_lengths().mean())


def _accuracy(backend, cfg, df, params, k, seed, ver) -> tuple[float, float]:
    """(mean reward, mean response tokens) of k rollouts per problem."""
    rates, tokens = _rates(backend, cfg, df, params, k, seed, ver)
    return float(rates.mean()), tokens


def corpus_answer_tokens(cfg: dict, corpus: Path | None, tokenizer: Path | None) -> dict:
    """Tokens of the pre-training targets (EOS included) per level: mean, min, max; and in world
    2.0 the share of rows that carry their template's slip and that are of a slip template."""
    if corpus is None or tokenizer is None or not (Path(corpus).exists()
                                                   and (Path(tokenizer) / "tokenizer.json").exists()):
        return {}
    from sparserl.evaluation.ood import load_fast_tokenizer
    corpus = read_table(corpus)
    tok = load_fast_tokenizer(Path(tokenizer))
    n = np.array([len(e.ids) + 1 for e in tok.encode_batch(corpus_targets(cfg, corpus),
                                                           add_special_tokens=False)])
    df = corpus.assign(tokens=n)
    out = {}
    for level, g in df.groupby("source"):
        row = {"rows": int(len(g)), "mean": float(g["tokens"].mean()), "min": int(g["tokens"].min()),
               "max": int(g["tokens"].max())}
        if "slip" in g.columns:
            row.update(slip_rows=float(g["slip"].mean()), slip_template_rows=float(g["slip_template"].mean()))
        out[level] = row
    out["all"] = {"rows": int(len(df)), "mean": float(n.mean()), "min": int(n.min()), "max": int(n.max())}
    return out


def greedy_wrong(cfg: dict, held: dict[str, tuple[pd.DataFrame, np.ndarray]]) -> dict:
    """Share of held-out problems whose greedy answer is wrong; in world 2.0 also over the
    problems of slip templates and of the others (`held`: set -> (problems, greedy rate))."""
    probs = pd.concat([df.assign(greedy=g) for df, g in held.values()], ignore_index=True)
    wrong = probs["greedy"] < 0.5
    out = {"problems": int(len(probs)), "heldout": float(wrong.mean())}
    w = worked.settings(cfg["tasks"])
    if w is not None:
        slip = np.array([worked.is_slip_template(worked.template(p), w["slip_share"], w["salt"])
                         for p in probs["problem"]])
        out.update(slip_problems=int(slip.sum()),
                   slip_templates=float(wrong[slip].mean()) if slip.any() else None,
                   other_templates=float(wrong[~slip].mean()) if (~slip).any() else None)
    return out


def policy_room(cfg: dict, ref: str, model: str, pool: Path, benchmarks: list, threads: int = 1) -> dict:
    """Greedy, sampled (T=1, top-p 1) and evaluation-protocol accuracy of the checkpoint dir
    `model`, labelled `ref`, on the pool and every benchmark file; `room` = greedy - sampled."""
    k = int(setting(cfg, "world", "samples"))
    pool = read_table(pool)
    cap = int(setting(cfg, "world", "max_pool"))
    if len(pool) > cap:  # paper-scale pools: a fixed random subset
        pool = pool.sample(n=cap, random_state=cfg["seed"]).reset_index(drop=True)
    sets = [("rl_pool", pool, None)] + [(Path(b).stem, read_table(b), protocol_for(cfg, Path(b).stem))
                                        for b in benchmarks]
    backend = make_backend(cfg, str(model), threads=threads)
    T = rollout_max_new_tokens(cfg)
    greedy = SamplingParams(greedy=True, max_new_tokens=T)
    sampled = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=T)
    rows, held_sets = {}, {}
    with open_verifier(cfg) as ver:
        for si, (name, df, spec) in enumerate(sets):
            seed = cfg["seed"] + 104_729 * (si + 1)
            g_rates, _ = _rates(backend, cfg, df, greedy, 1, seed, ver)
            g = float(g_rates.mean())
            s, tokens = _accuracy(backend, cfg, df, sampled, k, seed + 1, ver)
            row = {"problems": len(df), "greedy": g, f"sampled_t1_k{k}": s, "room": g - s,
                   "greedy_wrong": float((g_rates < 0.5).mean()), "mean_response_tokens": tokens}
            if name != "rl_pool":
                held_sets[name] = (df, g_rates)
            if spec is not None and spec.get("protocol") != "greedy":
                ep = SamplingParams(temperature=section_setting(spec, "$defs", "sampling", "temperature"),
                                    top_p=section_setting(spec, "$defs", "sampling", "top_p"), max_new_tokens=T)
                # the sampled score's settings already: the same number, not a second estimate
                same = (ep.temperature, ep.top_p) == (sampled.temperature, sampled.top_p)
                row["eval_protocol"] = s if same else _accuracy(backend, cfg, df, ep, k, seed + 2, ver)[0]
                row["eval_protocol_name"] = (f"T={ep.temperature:g}, top-p {ep.top_p:g}, "
                                             f"{k} samples")
            rows[name] = row
        timeouts = ver.timeout_counts()
    held = [r for n, r in rows.items() if n != "rl_pool"]
    out = {"policy": ref, "samples": k, "sets": rows,
           "heldout_mean": {key: float(np.mean([r[key] for r in held]))
                            for key in ("greedy", f"sampled_t1_k{k}", "room", "mean_response_tokens")},
           "greedy_wrong": greedy_wrong(cfg, held_sets), "verifier": timeouts}
    return out


def world_report(cfg: dict, models: dict[str, str], *, pool, benchmarks: list, out, corpus=None,
                 tokenizer=None, threads: int = 1) -> dict:
    """The report of `models` ({label: checkpoint dir}: the config's world policies, or e.g. an RL
    run's checkpoints) on the pool and `benchmarks` files, with the corpus overlap; written to `out`."""
    report = {"scale": cfg["scale"], "overlap": overlap(pool, corpus, benchmarks),
              "corpus_answer_tokens": corpus_answer_tokens(cfg, corpus, tokenizer),
              "policies": {ref: policy_room(cfg, ref, d, pool, benchmarks, threads=threads)
                           for ref, d in models.items()}}
    path = Path(out)
    write_json(report, path, cfg=cfg)
    o = report["overlap"]
    if "pool_in_corpus_share" in o:
        log.info(f"overlap: {o['pool_in_corpus']}/{o['pool_problems']} pool problems are in the "
                 f"pre-training corpus; {o['corpus_rows_from_pool_share']:.1%} of corpus rows")
    for ref, r in report["policies"].items():
        table = pd.DataFrame(r["sets"]).T.drop(columns=["eval_protocol_name"], errors="ignore")
        log.info(f"{ref}:\n{table.round(3).to_string()}")
        log.info(f"{ref}: greedy-wrong held-out problems {r['greedy_wrong']}")
    log.info(f"world report -> {path}")
    return report
