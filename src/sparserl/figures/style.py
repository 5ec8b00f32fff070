"""One look for every figure: seaborn's paper theme and one colour per method, the same in every
figure that draws it (GRPO G=8 is the same blue in the BASIS table, the V0.5 curves and the
head-to-head).

Colours come from one table, `METHOD_COLORS`: every method of configs/methods and the BASIS
study's estimators, each family near its own hue (GRPO blues, BASIS reds, V0.5 greens, Le
Critique purples), every two colours at least `MIN_DELTA_E` apart in CIELAB (CIE76 Delta E). It
was picked once by a greedy search: each name, family by family, takes the sRGB colour nearest its
family's anchor hue among those at least `MIN_DELTA_E` from every colour already taken. A name the
table lacks (a method added to configs/methods later) takes a colour of `NEW_COLORS`, a second set
chosen to stay far from the table and from each other, by a hash of its name; two new methods of
configs/methods whose hashes meet are resolved in name order, so each still gets its own colour.
tests/figures/test_figures.py checks the distances for every registered method. Le Critique's roles (Mean,
VF, Pvf, ...) keep fixed tab10 colours (`ROLE_COLORS`).
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np

MIN_DELTA_E = 16.0  # CIE76: about 2.3 is a just-noticeable difference; 16 reads apart side by side
# family prefix of a method name -> its facet in the learning curves; the first prefix a name
# starts with wins (grpo_budget before grpo, basis_grid before basis)
FAMILIES = (
    ("grpo_budget", "V0.5 and V0 priors"), ("grpo", "group baselines"), ("dapo", "group baselines"),
    ("rloo", "group baselines"), ("reinforce_pp", "group baselines"), ("vanilla", "group baselines"),
    ("gpg", "group baselines"), ("gspo", "group baselines"), ("basis", "BASIS"),
    ("v05", "V0.5 and V0 priors"), ("lc_", "Le Critique critics"),
)
FACETS = ("group baselines", "BASIS", "V0.5 and V0 priors", "Le Critique critics", "other methods")
METHOD_COLORS = {
    "basis_grid_gpg_g1_basis": "#e12d2d",
    "basis_grid_gpg_g1_rpp": "#b41e00",
    "basis_grid_gpg_g1_vanilla": "#d24b3c",
    "basis_grid_grpo_g1_basis": "#d2003c",
    "basis_grid_grpo_g1_rpp": "#f05a2d",
    "basis_grid_grpo_g1_vanilla": "#a5001e",
    "basis_grid_gspo_g1_basis": "#e11e00",
    "basis_grid_gspo_g1_rpp": "#ff5a69",
    "basis_grid_gspo_g1_vanilla": "#a53c0f",
    "basis_rvg": "#f0784b",
    "basis_unb": "#ff2d69",
    "basis_unb_inf": "#a52d3c",
    "basis_unb_prev": "#e16969",
    "basis_unb_vhat": "#c35a00",
    "basis_vop": "#b45a3c",
    "dapo_g16": "#1ea5d2",
    "gpg_g8": "#874b3c",
    "grpo": "#695aa5",
    "grpo_budget_oracle": "#b4870f",
    "grpo_budget_v0": "#c3781e",
    "grpo_g16": "#4b78c3",
    "grpo_g4": "#2d4b87",
    "grpo_g8": "#0f5ab4",
    "gspo_g8": "#96a50f",
    "lc_evpo": "#964bb4",
    "lc_math_evpo_g8": "#692d87",
    "lc_math_pvf_answer_g8": "#692da5",
    "lc_math_pvf_loo_g8": "#961ea5",
    "lc_math_tether_g8": "#b43ca5",
    "lc_math_vf_g8": "#964b96",
    "lc_mean": "#785ad2",
    "lc_pvf_answer": "#b45ae1",
    "lc_pvf_answer_lam": "#b478e1",
    "lc_pvf_loo": "#870078",
    "lc_tether": "#3c3ca5",
    "lc_tether_bucketed": "#b478c3",
    "lc_vf": "#e169e1",
    "lc_vf_lam": "#783cd2",
    "reinforce_pp": "#ff960f",
    "reinforce_pp_g1": "#ff7800",
    "rloo": "#3cb4a5",
    "rloo_g8": "#008778",
    "v05_k1": "#2da52d",
    "v05_k1_v0": "#00872d",
    "v05_k2": "#00b45a",
    "v05_k2_v0": "#5a961e",
    "v05_k4": "#78c34b",
    "v05_k4_v0": "#4bd25a",
    "v05_k8": "#4bb400",
    "v05_k8_v0": "#4ba55a",
    "v05_osla": "#78d278",
    "v05_osla_constant_prior": "#2d6900",
    "v05_osla_empirical_only": "#87b45a",
    "v05_osla_prior_only": "#87c31e",
    "v05_osla_v0": "#2dd22d",
    "vanilla_g1": "#5a5a5a",
}
NEW_COLORS = (
    "#0000ff", "#ff00ff", "#e1b487", "#5a4b00", "#ff00a5", "#ff78b4", "#a51eff", "#b4b4f0",
    "#b41e69", "#e196a5", "#3c5a2d", "#783c5a", "#004bff", "#e100c3", "#87874b", "#0078ff",
    "#87b487", "#c3b45a", "#d2b400", "#00d2a5", "#8796ff", "#b400d2", "#a5784b", "#787800",
    "#00a5ff", "#f09678", "#006996", "#874b00", "#5a0fd2", "#00d2f0", "#f0a5e1", "#c35a78",
)
# Le Critique's roles and the start policy: fixed colours (the tab10 ones)
ROLE_COLORS = {"Mean": "#595959", "VF": "#1f77b4", "Pvf": "#d62728", "Tether": "#2ca02c",
               "Tether (bucketed)": "#17becf", "EVPO": "#9467bd",
               "VF, λ=0.4^(1/L)": "#aec7e8", "Pvf, λ=0.4^(1/L)": "#ff9896", "start": "#000000"}


# seaborn's paper theme, sized to read at a paper's column width
THEME = {"context": "paper", "style": "whitegrid", "font_scale": 1.05,
         "rc": {"axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 7, "xtick.labelsize": 7.5,
                "ytick.labelsize": 7.5, "lines.linewidth": 1.4, "savefig.bbox": None, "figure.dpi": 100}}


# theme_rc's entries beside the rcParams: the colormap they name, which seaborn registers on import
# (rocket), and the single-letter colour codes set_theme redefines ("k" is seaborn's near-black)
COLORMAPS, COLOR_CODES = "colormaps", "color_codes"


def apply_style() -> None:
    """seaborn's `set_theme(**THEME)`, as the rcParams it sets (`theme_rc`), with the colormap
    they name (seaborn registers it on import) registered from its colours."""
    import matplotlib as mpl
    rc = dict(theme_rc())
    for name, colors in rc.pop(COLORMAPS, {}).items():
        if name not in mpl.colormaps:
            mpl.colormaps.register(mpl.colors.ListedColormap([tuple(c) for c in colors], name))
    for code, rgb in rc.pop(COLOR_CODES, {}).items():
        mpl.colors.colorConverter.colors[code] = tuple(rgb)  # as seaborn's set_color_codes does
    mpl.rcParams.update(rc)


def seaborn_rc() -> dict:
    """The rcParams `seaborn.set_theme(**THEME)` changes, computed by seaborn itself, and under
    COLORMAPS the colours of the colormap they name."""
    import matplotlib as mpl
    import seaborn as sns
    with mpl.rc_context():
        before = dict(mpl.rcParams)
        sns.set_theme(**THEME)
        after = dict(mpl.rcParams)
        codes = {c: list(mpl.colors.colorConverter.colors[c]) for c in "bgrmyck"}
    rc = {k: v for k, v in after.items() if v != before.get(k)}
    cmap = mpl.colormaps[after["image.cmap"]]
    rc[COLORMAPS] = {cmap.name: [list(map(float, c)) for c in cmap.colors]}
    rc[COLOR_CODES] = codes
    return rc


def theme_rc() -> dict:
    """`seaborn_rc`, cached as JSON per seaborn and matplotlib version and THEME in the user's
    cache folder: importing seaborn costs about 0.7 s (it imports scipy.stats), paid once a
    machine, not by each of the DAG's figure jobs. Without a writable cache it is computed."""
    import json
    import os
    from importlib.metadata import version
    from pathlib import Path
    blob = json.dumps([THEME, version("seaborn"), version("matplotlib")], sort_keys=True)
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparserl"
    path = folder / f"seaborn-theme-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json"
    try:
        return _decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        pass
    rc = seaborn_rc()
    try:
        from sparserl.core.artifacts import atomic_write_text
        atomic_write_text(path, json.dumps({k: v if k in (COLORMAPS, COLOR_CODES) else _encode(v) for k, v in rc.items()},
                                           sort_keys=True))
    except (OSError, TypeError):
        pass
    return rc


def _encode(v):
    if hasattr(v, "by_key"):  # a cycler (axes.prop_cycle)
        return {"cycler": {k: list(x) for k, x in v.by_key().items()}}
    return list(v) if isinstance(v, tuple) else v


def _decode(d: dict) -> dict:
    from matplotlib import cycler  # matplotlib's validating front of the cycler package

    def cyc(by_key: dict):  # JSON made the RGB tuples lists
        return cycler(**{k: [tuple(c) if isinstance(c, list) else c for c in x] for k, x in by_key.items()})
    return {k: cyc(v["cycler"]) if isinstance(v, dict) and set(v) == {"cycler"} else v for k, v in d.items()}


def _registered() -> tuple[str, ...]:
    from sparserl.methods.spec import method_names
    return tuple(method_names())


def family(method: str) -> str | None:
    """The method's family prefix (`FAMILIES`), None for a name of none."""
    return next((f for f, _ in FAMILIES if method.startswith(f)), None)


def facet(method: str) -> str:
    """The learning curves' panel of a method: its family's, "other methods" for a new family."""
    return dict(FAMILIES).get(family(method), "other methods")


def _slot(name: str) -> int:
    return int(hashlib.sha1(name.encode()).hexdigest(), 16) % len(NEW_COLORS)


@functools.lru_cache(maxsize=8)
def _new_assignment(registered: tuple[str, ...]) -> dict[str, str]:
    """Colours of the registered methods the table lacks: each its hash's slot of `NEW_COLORS`,
    the next free one when an earlier name (in sorted order) holds it."""
    taken: dict[int, str] = {}
    for name in sorted(n for n in registered if n not in METHOD_COLORS):
        i = _slot(name)
        for _ in range(len(NEW_COLORS)):
            if i not in taken:
                break
            i = (i + 1) % len(NEW_COLORS)
        else:
            raise ValueError(f"more than {len(NEW_COLORS)} methods of configs/methods have no colour in "
                             "figures/style.py's METHOD_COLORS; add theirs there")
        taken[i] = name
    return {n: NEW_COLORS[i] for i, n in taken.items()}


@functools.lru_cache(maxsize=None)
def method_color(method: str) -> str:
    """The colour of a method (or Le Critique role) in every figure, as a hex string."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    if method in ROLE_COLORS:
        return ROLE_COLORS[method]
    new = _new_assignment(_registered())
    if method in new:
        return new[method]
    # a name no config registers (a label of some figure): its slot, past the registered ones
    used = {NEW_COLORS.index(c) for c in new.values()}
    i = _slot(method)
    for _ in range(len(NEW_COLORS)):
        if i not in used:
            break
        i = (i + 1) % len(NEW_COLORS)
    return NEW_COLORS[i]


def method_colors(methods) -> list[str]:
    return [method_color(m) for m in methods]


def to_lab(hex_colors) -> np.ndarray:
    """CIELAB (D65) of sRGB hex colours, shape (n, 3)."""
    rgb = np.array([[int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)] for h in hex_colors], dtype=float)
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    d = 6 / 29
    f = np.where(xyz > d ** 3, np.cbrt(xyz), xyz / (3 * d * d) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


def min_delta_e(hex_colors) -> float:
    """The smallest CIE76 Delta E between two of `hex_colors` (inf for fewer than two)."""
    lab = to_lab(list(hex_colors))
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    d[np.diag_indices(len(lab))] = np.inf
    return float(d.min()) if len(lab) > 1 else float("inf")
