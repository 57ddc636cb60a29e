"""The phase-function registry (one line per model) and its dispatch on ``st.med_phase[m]``.

    phase_eval(st, m, d_in, d_out) -> float      p (= its sampling density)
    phase_sample(st, m, d_in, u) -> (d_out, pdf) exact sampling (weight 1)
    phase_eval_adjoint(st, m, d_in, d_out, d_val) scatter d_val ∂p/∂π into the gradient pool
Directions are propagation directions (see hg.py).
"""
import taichi as ti

from ..core.math import vec3
from ..registry import register
from .hg import HenyeyGreenstein
from .isotropic import Isotropic

PHASES = (
    Isotropic,
    HenyeyGreenstein,
)
BY_NAME, ALL = register(PHASES)


@ti.func
def phase_eval(st: ti.template(), m, d_in, d_out):
    res = 0.0
    t = st.med_phase[m]
    for i in ti.static(range(len(PHASES))):
        if t == PHASES[i].TAG:
            res = PHASES[i].eval(st, m, d_in, d_out)
    return res


@ti.func
def phase_sample(st: ti.template(), m, d_in, u):
    wo = vec3(0.0)
    pdf = 0.0
    t = st.med_phase[m]
    for i in ti.static(range(len(PHASES))):
        if t == PHASES[i].TAG:
            wo, pdf = PHASES[i].sample(st, m, d_in, u)
    return wo, pdf


@ti.func
def phase_eval_adjoint(st: ti.template(), m, d_in, d_out, d_val):
    t = st.med_phase[m]
    for i in ti.static(range(len(PHASES))):
        if t == PHASES[i].TAG:
            PHASES[i].eval_adjoint(st, m, d_in, d_out, d_val)
