"""A heterogeneous medium's 3-channel σ and albedo grids in the spectral variants, as Mitsuba's gridvolume: each
voxel's spectrum and scale interpolated separately (media/grid.py volume_spectrum, media/medium.py coefficients),
and in mono (the luminance): the hand-written adjoint (coefficients_adjoint) against central differences in f64,
per variant (a child process each; mono's adjoint once failed to compile, reading lanes 1 and 2 of its one lane).

The primal against Mitsuba's scalar_spectral: tests/test_textures_mitsuba.py (σ and albedo per wavelength) and
Mitsuba's render test (participating_media/test_hetero_sigmat_albedo passes its Z-test in spectral)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_util import run_f64_child  # noqa: E402

TO_WORLD = [[0.0, -1.6, 0.0, 0.3], [1.2, 0.0, 0.0, -0.2], [0.0, 0.0, 0.9, 0.1], [0, 0, 0, 1.0]]


def f64_checks(out_dir, h=1e-6, n=96):
    """(in an f64 child of the spectral or mono variant) per voxel component of both grids: ∂Σ_k <w_k, σt(p_k, λ_k)> + <v_k, α(p_k, λ_k)>
    by coefficients_adjoint against central differences of coefficients (the pool set in full precision on the
    device); a component whose differences at h and h/2 disagree (a cell edge of the upsampling table: a kink)
    is skipped, as in tests/test_envmap_spectral.py."""
    import taichi as ti

    import tirender
    from tirender import variants
    from tirender.core.math import vec3
    from tirender.launch import read_gradients, reset_gradients
    from tirender.media.medium import coefficients, coefficients_adjoint
    from tirender.media.volfile import write_vol
    L = variants.lanes()

    @ti.func
    def _lanes(a: ti.template(), k, o: ti.template()):
        v = variants.spec(0.0)
        for i in ti.static(range(L)):
            v[i] = a[k, o + i]
        return v

    @ti.kernel
    def _eval(st: ti.template(), p: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray(),
              out: ti.types.ndarray()):
        for k in range(p.shape[0]):
            s, a = coefficients(st, 0, vec3(p[k, 0], p[k, 1], p[k, 2]), _lanes(lam, k, 0))
            out[k] = _lanes(w, k, 0).dot(s) + _lanes(w, k, L).dot(a)

    @ti.kernel
    def _adjoint(st: ti.template(), p: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray()):
        for k in range(p.shape[0]):
            coefficients_adjoint(st, 0, vec3(p[k, 0], p[k, 1], p[k, 2]), _lanes(lam, k, 0), _lanes(w, k, 0),
                                 _lanes(w, k, L))

    rng = np.random.default_rng(7)
    for name, lo in (("sigma", 0.05), ("albedo", 0.05)):
        grid = rng.uniform(lo, 0.95, (3, 4, 5, 3)).astype(np.float32)
        grid[1, 2, 3] = [0.9, 0.1, 0.1]                 # a saturated voxel (a steep spectrum)
        write_vol(os.path.join(out_dir, f"{name}.vol"), grid)
    grid = lambda n: {"type": "grid", "filename": os.path.join(out_dir, f"{n}.vol"), "to_world": TO_WORLD}  # noqa
    sc = tirender.load_scene({
        "sensors": [{"film": {"width": 4, "height": 4}}],
        "media": {"fog": {"type": "heterogeneous", "density": grid("sigma"), "albedo": grid("albedo"), "scale": 2.0}},
        "shapes": [{"type": "cube", "interior": "fog", "bsdf": {"type": "null"}}]})
    st = sc.bind()
    names = [k for k in sc.params.keys() if k.startswith("fog.")]
    loc = rng.uniform(-0.1, 1.1, (n, 3))
    m = np.array(TO_WORLD)
    p = loc @ m[:3, :3].T + m[:3, 3]
    lam = rng.uniform(360.0, 830.0, (n, L))
    w = rng.uniform(-1.0, 1.0, (n, 2 * L))
    reset_gradients(st, 2.0 ** 36)
    _adjoint(st, p, lam, w)
    grads = read_gradients(sc, st)
    base = st.pool.to_numpy().astype(np.float64)
    out = np.zeros(n)

    def total(i, step):
        q = base.copy()
        q[i] += step
        st.pool.from_numpy(q)
        _eval(st, p, lam, w, out)
        return out.sum()

    rep = {}
    for name in names:
        g = grads[name].astype(np.float64).reshape(-1)
        off = sc.params.info(name).offset
        errs, kinks = [], 0
        for i in range(g.size):
            fd = [(total(off + i, s) - total(off + i, -s)) / (2 * s) for s in (h, h / 2)]
            if abs(fd[0] - fd[1]) > 1e-5 * max(abs(fd[0]), 1e-6):
                kinks += 1
                continue
            errs.append((abs(g[i] - fd[1]), abs(fd[1])))
        e = np.array(errs)
        rel = e[:, 0] / np.maximum(e[:, 1], 1e-6)
        rep[name] = {"cases": len(errs), "kinks": kinks, "max_rel_err": float(rel.max()),
                     "worst": e[np.argmax(rel)].tolist(), "max_err_over_scale": float(e[:, 0].max() / e[:, 1].max()),
                     "nonzero": int((np.abs(g) > 1e-6).sum())}
    st.pool.from_numpy(base)
    return rep


@pytest.mark.parametrize("variant", ["spectral", "mono"])
def test_grid_medium_adjoint_vs_central_differences_f64(tmp_path, variant):
    r = run_f64_child("test_media_grid_variants", "f64_checks", variant, tmp_path)
    assert len(r) == 2, r                                     # the density and the albedo grid
    for name, c in r.items():
        # the differences' own rounding is ~1e-9 absolute (h = 1e-6): within 1e-6 of the largest derivative, and
        # within 1e-5 relative element by element
        assert c["nonzero"] >= 40 and c["cases"] >= 50, (name, c)
        assert c["max_err_over_scale"] <= 1e-6 and c["max_rel_err"] <= 1e-5, (name, c)
