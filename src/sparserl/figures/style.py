"""One look for every figure: seaborn's paper theme and one colour per method, the same in every
figure that draws it (GRPO G=8 is the same blue in the BASIS table, the V0.5 curves and the
head-to-head).

Colours go by family (the method's name up to its first `_`-field that tells its variant), each
family a seaborn palette, a member's shade by its place in the family's sorted names: the RL
methods from configs/methods, the BASIS study's estimators and Le Critique's roles alike.
"""
from __future__ import annotations

import functools
import hashlib

# family prefix -> seaborn palette; the first prefix that a name starts with wins
FAMILIES = (
    ("grpo_budget", "YlOrBr"), ("grpo", "Blues"), ("dapo", "PuBu"), ("rloo", "GnBu"),
    ("reinforce_pp", "Oranges"), ("vanilla", "Greys"), ("gpg", "copper"), ("gspo", "YlGn"),
    ("basis", "Reds"), ("v05", "Greens"), ("lc_", "Purples"),
)
# Le Critique's roles and the study's reference estimators: fixed colours (the tab10 ones)
FIXED = {"Mean": "#595959", "VF": "#1f77b4", "Pvf": "#d62728", "Tether": "#2ca02c",
         "Tether (bucketed)": "#17becf", "EVPO": "#9467bd",
         "VF, λ=0.4^(1/L)": "#aec7e8", "Pvf, λ=0.4^(1/L)": "#ff9896",
         "reinforce_pp": "#ff7f0e", "grpo": "#1f77b4", "rloo": "#17becf", "start": "#000000"}
TAB = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
       "#bcbd22", "#17becf")


def apply_style() -> None:
    """seaborn's paper theme, sized to read at a paper's column width."""
    import seaborn as sns
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.05,
                  rc={"axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 7,
                      "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "lines.linewidth": 1.4,
                      "savefig.bbox": None, "figure.dpi": 100})


@functools.lru_cache(maxsize=1)
def _known_methods() -> tuple[str, ...]:
    from sparserl.methods.spec import method_names
    return tuple(method_names()) + ("basis_unb", "basis_vop", "basis_rvg", "basis_unb_prev", "basis_unb_inf", "basis_unb_vhat")


def family(method: str) -> str | None:
    return next((f for f, _ in FAMILIES if method.startswith(f)), None)


@functools.lru_cache(maxsize=None)
def method_color(method: str) -> str:
    """The colour of a method (or Le Critique role) in every figure, as a hex string."""
    import seaborn as sns
    if method in FIXED:
        return FIXED[method]
    fam = family(method)
    if fam is None:  # an unknown name: a stable tab10 colour from its hash
        return TAB[int(hashlib.sha1(method.encode()).hexdigest(), 16) % len(TAB)]
    members = sorted({m for m in _known_methods() if family(m) == fam} | {method})
    palette = dict(FAMILIES)[fam]
    # shades from 40% to 95% along the palette: its lightest ones vanish on white
    cmap = sns.color_palette(palette, as_cmap=True)
    n = len(members)
    at = 0.7 if n == 1 else 0.4 + 0.55 * members.index(method) / (n - 1)
    r, g, b = cmap(at)[:3]
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def method_colors(methods) -> list[str]:
    return [method_color(m) for m in methods]
