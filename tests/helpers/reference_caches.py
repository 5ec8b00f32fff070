"""Synthetic rollout caches in the layout of the reference and oracle caches (one row a prompt:
its n rewards, successes and pass rate), for the value studies' tests."""
import numpy as np
import pandas as pd


def cache_frame(ids, successes, n, rng):
    rows = []
    for pid, s in zip(ids, successes):
        r = np.zeros(n, dtype=int)
        r[:s] = 1
        rng.shuffle(r)
        rows.append(dict(prompt_id=pid, n=n, successes=int(s), phat=s / n, rewards=r.tolist()))
    return pd.DataFrame(rows)
