"""The environment map in the spectral variants, as Mitsuba's envmap: each texel's spectrum and scale interpolated
separately (emitters/envmap.py eval_spectral), and its hand-written adjoint against central differences in f64.

Mitsuba's own check of the primal is its render test (benchmarks/mitsuba_suite.py: bsdf_spheres' envmap scenes in
spectral, which failed on the sky's coloured edges while tirender upsampled the interpolated RGB)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_util import run_f64_child  # noqa: E402


def _scene(path):
    """A camera looking at a coloured 8 × 4 sky (neighbouring texels of different colours and maxima), direct view
    only: every sample is one lookup of the map, replayed exactly by the gradient."""
    rng = np.random.default_rng(3)
    env = rng.uniform(0.05, 2.0, (4, 8, 3))
    env[1, 2] = [3.0, 0.1, 0.1]
    env[2, 5] = [0.0, 0.0, 0.0]        # a black texel: its spectrum is 0, no gradient through its scale
    np.save(path, env)
    return {"integrator": {"type": "path", "max_depth": 1},
            "sensors": [{"type": "perspective", "fov": 150, "fov_axis": "x",
                         "to_world": {"look_at": {"origin": [0, 0, 0], "target": [0, 0.3, -1], "up": [0, 1, 0]}},
                         "film": {"width": 12, "height": 6, "filter": {"type": "box"}}}],
            "emitters": [{"id": "sky", "type": "envmap", "data": path}]}


def f64_checks(out_dir, h=1e-6, n=64):
    """(in a spectral f64 child) per texel component: ∂Σ_k <w_k, Le(d_k, λ_k)>/∂texel by eval_spectral_adjoint
    against central differences of eval_spectral (the pool set in full precision on the device), for n random
    directions and wavelengths; a component whose differences at h and h/2 disagree (a cell edge of the
    upsampling table: a kink) is skipped, as in tests/test_variants.py."""
    import taichi as ti

    import tirender
    from tirender import variants
    from tirender.core.math import vec3
    from tirender.emitters.envmap import Envmap
    from tirender.launch import read_gradients, reset_gradients
    L = variants.lanes()

    @ti.func
    def _lanes(a: ti.template(), k):
        v = variants.spec(0.0)
        for i in ti.static(range(L)):
            v[i] = a[k, i]
        return v

    @ti.kernel
    def _eval(st: ti.template(), d: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray(),
              out: ti.types.ndarray()):
        for k in range(d.shape[0]):
            out[k] = _lanes(w, k).dot(Envmap.eval_spectral(st, 0, vec3(d[k, 0], d[k, 1], d[k, 2]), _lanes(lam, k)))

    @ti.kernel
    def _adjoint(st: ti.template(), d: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray()):
        for k in range(d.shape[0]):
            Envmap.eval_spectral_adjoint(st, 0, vec3(d[k, 0], d[k, 1], d[k, 2]), _lanes(lam, k), _lanes(w, k))

    sc = tirender.load_scene(_scene(os.path.join(out_dir, "sky.npy")))
    st = sc.bind()
    name = [k for k in sc.params.keys() if k.startswith("sky")][0]
    rng = np.random.default_rng(5)
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    lam = rng.uniform(360.0, 830.0, (n, L))
    w = rng.uniform(-1.0, 1.0, (n, L))
    reset_gradients(st, 2.0 ** 36)
    _adjoint(st, d, lam, w)
    g = read_gradients(sc, st)[name].astype(np.float64).reshape(-1)
    off = sc.params.info(name).offset
    base = st.pool.to_numpy().astype(np.float64)
    out = np.zeros(n)

    def total(i, step):
        p = base.copy()
        p[off + i] += step
        st.pool.from_numpy(p)
        _eval(st, d, lam, w, out)
        return out.sum()

    errs, kinks = [], 0
    for i in range(g.size):
        if base[off + i] <= 2 * h:                  # the black texel: no two-sided difference at 0
            continue
        fd = [(total(i, s) - total(i, -s)) / (2 * s) for s in (h, h / 2)]
        if abs(fd[0] - fd[1]) > 1e-5 * max(abs(fd[0]), 1e-6):
            kinks += 1
            continue
        errs.append(abs(g[i] - fd[1]) / max(abs(fd[1]), 1e-6))
    st.pool.from_numpy(base)
    return {"cases": len(errs), "kinks": kinks, "max_rel_err": max(errs),
            "nonzero": int((np.abs(g) > 1e-6).sum())}


def test_envmap_spectral_adjoint_vs_central_differences_f64(tmp_path):
    r = run_f64_child("test_envmap_spectral", "f64_checks", "spectral", tmp_path)
    assert r["nonzero"] >= 40 and r["cases"] >= 60 and r["max_rel_err"] <= 1e-6, r
