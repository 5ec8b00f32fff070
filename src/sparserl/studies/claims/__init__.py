"""The claims table: one row per headline claim of the four papers, measured on our artifacts.

`sparserl claims` (rule `claims`, workflow/rules/claims.smk) writes `paper_figures/{scale}/CLAIMS.md`
and `CLAIMS.csv`. Each claim is a `Claim` record in `CLAIMS`: the paper, its wording and number,
the quantity we measure with the relation the paper states (`>` or `<` a threshold), the figure
that shows it, and two functions: `inputs(P)`, the artifacts the claim reads in the tree of `P` (a `Paths`; or
`NotRun` when the config never makes them), and `measure(ctx)`, the quantity with its 95% interval. A new claim is a
few lines in `catalog.py`: a factory of the measure modules (`rl.rl_diff`, `v0.v0_auc`,
`le_critique.critique_diff`, ...) or a new pair of functions.

Statuses per row, each made by one function in code (never typed):
direction_status (`decide`):
  relation ">" threshold t:  reproduced     when the interval lies above t (lo > t)
                             contradicted   when it lies below t (hi < t)
                             inconclusive   when it contains t (the row gives the smallest effect
                                            this scale detects at POWER: `detectable`)
                             untestable (single run) when it has no finite bound
  relation "<" t: the mirror image.
  not run at this scale: the config does not make the claim's artifact or does not run its
  methods (the reason column says which); an artifact the config makes but that is missing on
  disk is an error naming it, not a status.
premise_status (`premise_status`): the mechanism the claim rests on (`Claim.premise`: vanilla
  collapses, k <= 2 collapses, the critic explains variance), measured here by the same rule:
  present, absent or unclear. A non-inferiority claim (`Claim.margin`) has the compared method's
  gain as its premise: its threshold is -NI_FRACTION x that gain, absent when it gains nothing.
magnitude_status (`magnitude`), against the paper's own number (`Claim.paper_value`, on our
  scale: accuracy as a fraction, MSE changes in %): "in CI" when our interval contains it (a range:
  overlaps it); for scale-free quantities (`Claim.scale_free`: AUC, % change, a coefficient)
  "within 2x" when measured / paper lies in [1/2, 2] (`MAGNITUDE_FACTOR`); else "off by Nx" or
  "opposite sign"; "no paper number" where the paper states none; "not measured" where we have
  no number.
status (`overall`): not run; premise absent when the premise is absent (the data cannot judge
  the claim); reproduced only when the direction is reproduced and the magnitude is in CI (or
  within the factor); "direction only" when the direction is reproduced but the paper gives no
  number or its number is off; else the direction status.
The threshold is what the paper states: a bound it gives ("Intra-AUC > 0.85"), 0 for "A beats B"
or "A reduces B's MSE", and a margin for "A matches B" (above). A paper's absolute accuracy gap
("over 10%") is not the threshold but its `paper_value`.

Intervals (the `ci_method` column says which): RL accuracy and gains by the
hierarchical bootstrap (`sparserl.core.hierarchical_bootstrap`, `BOOT` resamples, RNG seed
`BOOT_SEED`): start policies, RL seeds within each, benchmark problems (stratified), the arms paired
by start and problem; the column names the levels and their units ("1 start x 1 seed x 427
problems"), widened to the Student t interval over seeds where that is wider (a percentile
bootstrap over 3 seeds understates their spread). Other start policies: with `head_to_head.pool`
(configs/overlays/pool_start1.yaml) an RL row pools its methods' runs of every pooled tree as
further starts, exactly as the head-to-head does (`head_to_head.pool_trees`; the (starts, seeds,
problems) arrays from `hierarchical_bootstrap.arm_array`, the one builder of both): each start's
gain against its own start policy's evaluation, the arms paired by start and problem, the column
naming "2 starts x N seeds x J problems" and the detail each start's own value ("per start 0, 1");
with >= 2 seeds a start, widened to the t interval over the (start, seed) runs where wider. A
method a pooled tree did not run keeps the row on this tree's start alone, and the column says so
("not pooled: start 1 (...) did not run ..."). The rollouts and the sharpening context beside an
RL row stay this tree's runs.parquet. Elsewhere, with >= 2 seeds a Student t interval over seeds (of the per-seed
differences when both arms ran the same seeds: a seed fixes the data order, so the arms are
paired; Welch otherwise); with one seed a percentile bootstrap over the per-unit artifact:
checkpoint contexts (model, step) for V0's intra-context AUC; the BASIS value study's own paired bootstrap over batches for its MSE ratios
(its n-sensitivity table has s.e. only: a normal interval by the delta method). Le Critique's
final table has one row per run, so one seed, or seeds that agree exactly, give no interval
(NaN bounds: untestable).

Modules: `rule` (statuses, records, intervals), `context` (artifacts read once), the measures per
paper (`rl`, `v0`, `basis`, `le_critique`), `catalog` (CLAIMS) and `table` (rows, Markdown, CSV,
HTML). Layers: the package reads artifacts and method specs (`sparserl.methods.spec`); the figure a
claim points to is resolved by the caller (the CLI passes the registered figures' paths), since
figures import studies and not the reverse.
"""
from __future__ import annotations

from .basis import basis_headline, basis_refined_vs_initial, basis_sensitivity_n
from .catalog import CLAIMS
from .context import BadArtifact, Context, MissingArtifact, NotRun
from .le_critique import critic_learns, critique_diff, tether_rho
from .rl import collapses, gain_margin, rl_accuracy, rl_diff, rl_gain, sharpening_context
from .rule import (ABSENT, BOOT, BOOT_SEED, CONTRADICTED, DIRECTION_ONLY, DIRECTION_STATUSES, IN_CI,
                   INCONCLUSIVE, MAGNITUDE_FACTOR, NI_FRACTION, NO_PAPER, NOT_MEASURED, NOT_RUN, OPPOSITE,
                   PAPERS, POWER, PREMISE_ABSENT, PRESENT, REPRODUCED, STATUSES, UNCLEAR, UNTESTABLE, WITHIN,
                   Claim, Interval, Margin, Premise, decide, detectable, group_bootstrap, magnitude, overall,
                   premise_status, seed_interval, stratified_bootstrap_diff)
from .table import build_rows, claim_inputs, html_path, resolve_target, to_html, to_markdown, write_claims
from .v0 import auc_margin, v0_auc, v0_auc_interval

__all__ = ["ABSENT", "auc_margin", "BadArtifact", "basis_headline", "basis_refined_vs_initial",
           "basis_sensitivity_n", "BOOT", "BOOT_SEED", "build_rows", "Claim", "claim_inputs", "CLAIMS", "collapses",
           "Context", "CONTRADICTED", "critic_learns", "critique_diff", "decide", "detectable", "DIRECTION_ONLY",
           "DIRECTION_STATUSES", "gain_margin", "group_bootstrap", "html_path", "IN_CI", "INCONCLUSIVE", "Interval",
           "magnitude", "MAGNITUDE_FACTOR", "Margin", "MissingArtifact", "NI_FRACTION", "NO_PAPER", "NOT_MEASURED",
           "NOT_RUN", "NotRun", "OPPOSITE", "overall", "PAPERS", "POWER", "Premise", "PREMISE_ABSENT",
           "premise_status", "PRESENT", "REPRODUCED", "resolve_target", "rl_accuracy", "rl_diff", "rl_gain",
           "seed_interval", "sharpening_context", "STATUSES", "stratified_bootstrap_diff", "tether_rho", "to_html",
           "to_markdown", "UNCLEAR", "UNTESTABLE", "v0_auc", "v0_auc_interval", "WITHIN", "write_claims"]
