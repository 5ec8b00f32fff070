"""Value models: who says what a prompt's success probability is.

The priors of V0.5 (oracle, constant, and the V0 generalist value model `v0`, each a prior kind of
`priors.register_prior`), the Monte Carlo values of the reference and oracle rollout caches
(`mcvalues`), V0.5's support buffer (`support`) and Le Critique's critic (`critic`, `critic_inputs`).
"""
