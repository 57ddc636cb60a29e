"""A surface that moves under a light at a point (point, spot, projector) in the geometry gradients of
``prb_attached`` (``direct_projective`` / ``prb_projective``): next-event estimation there holds the light's position,
not the direction to it, which turns with the vertex while Le/pdf moves (1/r², a spot's falloff and texture, a
projector's frustum factor and image; emitters' ``ref_grad``). A directional light's direction is held (exact).
Before, the NEE of every Dirac emitter was left out at moving vertices: a floor moving under a point light had a
gradient of exactly 0 (central differences 150.5), one turning under a directional light 0 (-7.52).

* f64 (child process): each model's ``ref_grad`` against central differences of its sample's Le/pdf w.r.t. the
  reference point (the spot inside its falloff ramp and its texture, the projector's image and frustum factor);
* whole-render gradients of a floor's translation and rotation under each light against central differences with
  correlated random numbers (3 SE), and the rotation under a directional light. One scene holds the four lights,
  all but one dark: one kernel specialisation for every case.

``python tests/test_point_lights_moving.py --f64`` runs the f64 child by hand."""
import json
import os
import sys

import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, central_differences, f64_child_report, max_rel_err, projected_gradients
from scenes import POINT_LIGHTS, moving_under_point_lights, sdf_sheet


def _scene(kind, tmp, w=20):
    """A tilted diffuse floor, differentiable, filling the view, lit by one of the four lights (the others dark; an
    SDF sheet far to the side: one kernel specialisation with test_sdfgrid's gradient checks). The projector's frustum,
    whose edge is a discontinuity the boundary terms do not sample, reaches beyond the view."""
    sdf_sheet(tmp)
    return tirender.load_scene(moving_under_point_lights(tmp, {kind: 1.0}, floor_diff=True, sheet_diff=True),
                               base_dir=tmp)


def checks():
    """(name -> largest relative error over random reference points); runs under fp = f64."""
    import tempfile

    import taichi as ti
    from tirender.core.math import vec2, vec3
    from tirender.emitters import registry as emitters
    rng = np.random.default_rng(4)
    out = {}
    tmp = tempfile.mkdtemp()
    n = len(POINT_LIGHTS)
    for e, kind in enumerate(("point", "spot", "projector")):        # the scene's emitters 0, 1, 2
        sc = _scene(kind, tmp)
        st = sc.bind()
        em = sc.em_mask

        @ti.kernel
        def k_val(x: ti.types.ndarray(), w: ti.types.ndarray(), u: ti.f64) -> ti.f64:
            ds = emitters.sample_emitter(st, em, vec3(x[0], x[1], x[2]), vec2(u, 0.5), vec3(0.0))
            return ds.weight.dot(vec3(w[0], w[1], w[2]))

        @ti.kernel
        def k_adj(x: ti.types.ndarray(), w: ti.types.ndarray(), u: ti.f64, res: ti.types.ndarray()):
            ds = emitters.sample_emitter(st, em, vec3(x[0], x[1], x[2]), vec2(u, 0.5), vec3(0.0))
            g = emitters.ref_grad(st, em, ds, vec3(w[0], w[1], w[2]), vec3(0.0))
            for i in ti.static(range(3)):
                res[i] = g[i]

        u = (e + 0.5) / n                     # picks emitter e

        errs = []
        ramp = 0
        for _ in range(4000):
            if len(errs) >= 100:
                break
            x = np.array([*rng.uniform(-0.9, 0.9, 2), rng.uniform(-0.3, 0.3)])
            w = rng.normal(size=3)
            if k_val(x, w, u) == 0.0:
                continue                      # outside the cone or the frustum
            adj = np.zeros(3)
            k_adj(x, w, u, adj)
            fd = central_differences(lambda y: k_val(y, w, u), x)
            if np.abs(fd).max() > 1e3:       # a texel boundary (bilinear kink) inside the difference
                continue
            errs.append(max_rel_err(adj, fd))
            if kind == "spot":
                d = x - np.array([-0.2, 0.1, 1.8])
                axis = np.array([0.1, -0.1, -1.8]) / np.linalg.norm([0.1, -0.1, -1.8])
                ramp += bool(np.degrees(np.arccos(d @ axis / np.linalg.norm(d))) > 12.0)
        out[f"{kind} Le/pdf w.r.t. the reference point"] = {"max_rel_err": float(np.quantile(errs, 0.98)),
                                                            "cases": len(errs)}
        if kind == "spot":
            out["spot Le/pdf w.r.t. the reference point"]["ramp"] = ramp
    return out


def test_ref_grad_vs_central_differences_f64():
    report = f64_child_report(__file__)
    assert len(report) == 3
    assert report["spot Le/pdf w.r.t. the reference point"]["ramp"] >= 20     # the falloff's slope is exercised
    for name, r in report.items():
        assert r["cases"] >= 100, (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)


@pytest.mark.parametrize("kind", POINT_LIGHTS)
def test_floor_moving_under_a_light_at_a_point(kind, tmp_path):
    """<w, image> along a translation and a rotation of the floor: prb_attached against central differences."""
    sc = _scene(kind, str(tmp_path))
    wts = np.random.default_rng(2).uniform(0, 1, (20, 20, 3)).astype(np.float32)
    moves = (("floor.translation", [0.3, -0.2, 1.0]), ("floor.rotation", [4.0, -3.0, 2.0]))
    for pname, u in moves[1:] if kind == "directional" else moves:     # (a plane sliding under parallel light: 0)
        u = np.asarray(u, np.float32)
        g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(4)), [], 1e-2, method=None)
        _, f = projected_gradients(sc, pname, u, wts, 64, [], list(range(100, 104)), 1e-2 if "tr" in pname else 0.2)
        mg, mf, se = assert_agree(g, f, f"{kind}: {pname}")
        print(f"{kind} {pname}: {mg:.4g} against central differences {mf:.4g} (3 SE {3 * se:.2g})")


if __name__ == "__main__" and "--f64" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(checks()))
