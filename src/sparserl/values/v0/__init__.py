"""V0: a generalist value model for any policy at state zero.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero", Figure 2.

p(x_t | C) for a target prompt x_t given a context C = {(x_i, r_i)} of one policy's past results:
a frozen text embedder (`embedder`), a trainable Residual Query Adapter (`adapter`) and a frozen
in-context head (`heads`: TabPFN through the `tabpfn` package, or the offline GP head of the tiny
scale). `model.V0` puts them together, `loss` is its training objective, `metrics` its scores,
`baselines` what the paper compares it with, and `official` runs it on the paper's released sample.
"""
