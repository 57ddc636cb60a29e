"""Adam (tirender/optim/adam.py): Dr.Jit's step (ε inside the square root of the uncorrected second
moment) in absolute mode, the default (Dr.Jit's ε), and the relative ε's invariance to the scale of
the loss."""
import numpy as np
import pytest
import taichi as ti

import tirender
from tirender.optim.adam import Adam, cover


def _run(grad_fn, x0, steps, **kw):
    tirender.init("cpu")
    n = len(x0)
    x = ti.field(ti.f32, n)
    g = ti.field(ti.f32, n)
    x.from_numpy(np.asarray(x0, np.float32))
    opt = Adam(x, g, **kw)
    traj = []
    for _ in range(steps):
        g.from_numpy(grad_fn(x.to_numpy()).astype(np.float32))
        opt.step()
        traj.append(x.to_numpy().copy())
    return np.array(traj)


def _drjit_reference(grad_fn, x0, steps, lr, eps, b1=0.9, b2=0.999):
    x = np.asarray(x0, np.float64)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    out = []
    for t in range(1, steps + 1):
        gr = grad_fn(x)
        m = b1 * m + (1 - b1) * gr
        v = b2 * v + (1 - b2) * gr * gr
        x = x - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / np.sqrt(v + eps * eps)
        out.append(x.copy())
    return np.array(out)


TARGET = np.linspace(-1.0, 2.0, 12)
SCALES = np.geomspace(1.0, 1e-3, 12)   # per-element curvature: some elements see much smaller gradients


def _quad(c):
    return lambda x: c * SCALES * (x - TARGET)


def test_absolute_mode_is_drjits_step():
    x0 = np.zeros(12)
    a = _run(_quad(1e-4), x0, 40, lr=0.05, eps_mode="absolute", eps=1e-6)
    b = _drjit_reference(_quad(1e-4), x0, 40, lr=0.05, eps=1e-6)
    assert np.allclose(a, b, rtol=1e-4, atol=1e-5), np.abs(a - b).max()


def test_default_eps_is_drjits():
    """The default ε is Dr.Jit's absolute 1e-8 (mi.ad.Adam's step, chosen by benchmarks/defaults_sweep.py)."""
    x0 = np.zeros(12)
    a = _run(_quad(1e-6), x0, 40, lr=0.05)
    b = _drjit_reference(_quad(1e-6), x0, 40, lr=0.05, eps=1e-8)
    assert np.allclose(a, b, rtol=1e-4, atol=1e-5), np.abs(a - b).max()


@pytest.mark.parametrize("c", [1e-6, 1e3])
def test_relative_eps_is_invariant_to_the_loss_scale(c):
    """eps_mode relative: the trajectory does not depend on the scale of the loss. The default
    (absolute, Dr.Jit's) does: scaled by 1e-6 the gradients (1e-9 … 1e-6) sit at or below ε = 1e-8
    and the steps are damped — what a user gives up with the default (docs/optimize.md)."""
    x0 = np.zeros(12)
    ref = _run(_quad(1.0), x0, 60, lr=0.05, eps_mode="relative")
    scaled = _run(_quad(c), x0, 60, lr=0.05, eps_mode="relative")
    assert np.allclose(scaled, ref, rtol=1e-4, atol=1e-5), np.abs(scaled - ref).max()
    default = _run(_quad(1.0), x0, 60, lr=0.05)
    default_scaled = _run(_quad(c), x0, 60, lr=0.05)
    if c < 1:
        assert np.abs(default_scaled - default).max() > 0.1
        assert np.abs(default_scaled[-1] - x0).max() < 0.6 * np.abs(default[-1] - x0).max()   # damped
    else:   # gradients far above ε: it no longer matters, the default is scale-invariant there too
        assert np.allclose(default_scaled, default, rtol=1e-4, atol=1e-5), np.abs(default_scaled - default).max()


def test_relative_eps_per_segment():
    """Two segments with gradients 1e6 apart: each gets ε from its own RMS, so the small one moves
    as if alone (one global ε would freeze it)."""
    x0 = np.zeros(12)
    big = lambda x: np.where(np.arange(12) < 6, 1e3, 1e-3) * (x - TARGET)  # noqa: E731
    rel = dict(lr=0.05, eps=0.05, eps_mode="relative")
    alone = _run(lambda x: 1e-3 * (x - TARGET[6:]), np.zeros(6), 40, **rel)
    seg = _run(big, x0, 40, segments=[(0, 6), (6, 12)], **rel)
    one = _run(big, x0, 40, **rel)
    assert np.allclose(seg[:, 6:], alone, rtol=1e-4, atol=1e-5)
    assert np.abs(one[-1, 6:] - TARGET[6:]).max() > 2 * np.abs(seg[-1, 6:] - TARGET[6:]).max()


def test_cover_fills_gaps():
    assert cover([(2, 4), (6, 7)], 10) == [(0, 2), (2, 4), (4, 6), (6, 7), (7, 10)]
    assert cover(None, 5) == [(0, 5)]
    with pytest.raises(ValueError):
        cover([(0, 4), (3, 6)], 8)
