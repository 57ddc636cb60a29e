"""Gradient-index (GRIN) optics: a refractive-index grid whose rays bend by the eikonal ODE, with
replay adjoints, and the two-view caustic design of Mitsuba 2 §4.3 (``tirender optimize`` with a
``grin:`` section). See docs/grin.md.

Modules: :mod:`.field` (the trilinear index grid n(x), ∇n and their adjoints), :mod:`.trace` (RK4
transport, Snell at the box faces, the replayed adjoint), :mod:`.project` (collimated beams → screens
with a differentiable splat), :mod:`.train` / :mod:`.cli` (the optimisation driver).
Import after ``tirender.backend.init`` when a float64 build is wanted (kernels take Taichi's
default float).
"""
