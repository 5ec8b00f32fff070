"""Value models: who says what a prompt's success probability is.

Today: the priors of V0.5 (oracle, constant; `priors`) and the Monte Carlo values of the reference
and oracle rollout caches (`mcvalues`). Tomorrow: the V0 generalist value model and the Le
Critique critics, each registered as a prior kind (`priors.register_prior`).
"""
