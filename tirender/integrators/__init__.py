"""Integrators: one algorithm per module (path, aov, volpath; the gradient methods prb, rb,
prbvolpath), each a short composition of the walk steps (tirender/walk) and its host driver;
``registry.py`` maps (integrator, gradient method) to them."""
