"""RL methods: the typed spec of `configs/methods/<name>.yaml`, the side data its estimator needs,
and how it samples (plain, DAPO dynamic sampling, OSLA rounds). Both engines call this layer;
neither branches on a method's name."""
