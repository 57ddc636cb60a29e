"""Attached PRB (issue 16 part 4, integrators/prb_attached.py): normal maps on Dirac surfaces seen
through glass or in a mirror.

* f64 adjoints against central differences (child process, fp = f64): the normal map's lobe normal
  n' w.r.t. its texels and uv (bsdfs/normalmap.py), the lobe normal in world space through the
  shading frame of a smooth mesh (walk/attached.lobe_normal_adjoint, core/interaction.frame_adjoint),
  a textured area light's radiance w.r.t. uv and an environment map's w.r.t. the direction
  (emitters eval_grad), the Dirac lobes' ∂ ln value/∂cos θi (dielectric, conductor), and
  near-specular attached sampling's half-vector warp (bsdfs/halfwarp.py) through the dispatcher;
* whole-pipeline gradients w.r.t. every normal-map texel against finite differences of the full
  render with correlated random numbers (glass slab over a textured area light, over an environment
  map; a mirror reflecting a textured light), where detached PRB returns exactly 0; the same for a
  normal map on a rough mirror and rough glass and for the mirror's roughness (attached_roughness);
* configs/normalmap_glass.yaml recovers the normal map (texel RMSE >= 3x lower) and detached PRB
  does not move it.
``python tests/test_attached_prb.py --f64`` runs the f64 child by hand (``--f64-thin``: thindielectric's lobe
probabilities w.r.t. cos θi and int_ior)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tirender
from gradcheck_util import f64_child_report, assert_agree, central_differences, max_rel_err, projected_gradients
from scenes import camera, ray_hit, ray_hit_x

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _write_inputs(tmp, tilt=0.06, seed=3):
    """A smooth RGB radiance pattern (rad.npy) and an 8x8 normal map with random tilts (nm.npy)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:16, 0:16] / 15.0
    rad = np.stack([0.5 + 0.45 * np.sin(6 * x + 1), 0.5 + 0.45 * np.cos(5 * y), 0.5 + 0.4 * np.sin(4 * (x + y))], -1)
    np.save(os.path.join(tmp, "rad.npy"), (2.0 * rad).astype(np.float32))
    nm = np.zeros((8, 8, 3), np.float32) + [0.5, 0.5, 0.9]
    nm[..., :2] += rng.uniform(-tilt, tilt, (8, 8, 2))
    np.save(os.path.join(tmp, "nm.npy"), nm)


def _scene(tmp, backdrop="area", mirror=False, w=32):
    """A normal-mapped glass slab (two faces, 0.3 apart) seen from above over a textured area light or
    an environment map; or a normal-mapped mirror reflecting a large textured light."""
    _write_inputs(tmp)
    bs = {"inner": {"type": "conductor"} if mirror else {"type": "dielectric", "int_ior": 1.5},
          "top": {"type": "normalmap", "bsdf": "inner", "normalmap": {"type": "bitmap", "data": "nm.npy"}},
          "glass": {"type": "dielectric", "int_ior": 1.5}}
    sh = [{"id": "top", "type": "rectangle", "bsdf": "top"}]
    em = []
    if mirror:
        sh.append({"id": "screen", "type": "rectangle",
                   "to_world": [{"scale": 12.0}, {"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, 5]}],
                   "emitter": {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}})
    else:
        sh.append({"id": "bottom", "type": "rectangle", "bsdf": "glass",
                   "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, -0.3]}]})
        if backdrop == "area":
            sh.append({"id": "screen", "type": "rectangle", "to_world": [{"scale": 3.0}, {"translate": [0, 0, -1.5]}],
                       "emitter": {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}})
        else:
            em.append({"type": "envmap", "data": "rad.npy"})
    origin = [0.0, -1.2, 2.7] if mirror else [0, 0, 3]
    return tirender.load_scene({"integrator": {"type": "path", "max_depth": 6, "rr_depth": 100},
                                "sensors": [camera(origin, [0, 0, 0], fov=30, w=w, h=w)],
                                "bsdfs": bs, "shapes": sh, "emitters": em}, base_dir=str(tmp))


@pytest.mark.parametrize("case", ["glass_area", pytest.param("glass_envmap", marks=pytest.mark.extended),
                                  pytest.param("mirror_area", marks=pytest.mark.extended)])
def test_normalmap_gradients_vs_finite_differences(tmp_path, case):
    sc = _scene(tmp_path, backdrop="envmap" if "envmap" in case else "area", mirror=case.startswith("mirror"))
    rng = np.random.default_rng(1)
    wts = rng.uniform(0, 1, (32, 32, 3)).astype(np.float32)
    u = rng.normal(size=sc.params["top.normalmap"].shape).astype(np.float32)
    g, f = projected_gradients(sc, "top.normalmap", u, wts, 16, [11, 12, 13, 14, 15, 16], [21, 22, 23, 24], 1e-2,
                               method="prb_attached")
    mg, mf, se = assert_agree(g, f, case)
    det = tirender.render_grad(sc, wts, spp=4, seed=3, method="prb", progress=False)["top.normalmap"]
    print(f"{case}: attached {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g}); detached PRB {np.abs(det).max():.3g}")
    assert np.abs(det).max() == 0.0          # the normal map moves the path only: detached PRB sees nothing


@pytest.mark.slow
@pytest.mark.extended   # ~100 s of compilation cold; the default lane checks an IOR through attached PRB on the rough
#                         glass (test_rough_glass_ior_gradient_vs_finite_differences) and the attached adjoints in f64
def test_ior_gradients_vs_finite_differences(tmp_path):
    """A dielectric's IOR (int_ior, a pool parameter) moves the refracted paths through a glass slab over a textured
    light and changes its Fresnel lobes: attached PRB against finite differences; detached PRB sees nothing."""
    sc = _scene(tmp_path)
    rng = np.random.default_rng(2)
    wts = rng.uniform(0, 1, (32, 32, 3)).astype(np.float32)
    for pname in ("inner.int_ior", "glass.int_ior"):
        g, f = projected_gradients(sc, pname, np.ones(1, np.float32), wts, 16, [11, 12, 13, 14], [21, 22, 23], 1e-2,
                                   method="prb_attached")
        mg, mf, se = assert_agree(g, f, pname)
        print(f"{pname}: attached {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")
    det = tirender.render_grad(sc, wts, spp=4, seed=3, method="prb", progress=False)["inner.int_ior"]
    assert np.abs(det).max() == 0.0


@pytest.mark.slow
@pytest.mark.extended   # a prb_attached kernel with quadrics (~60 s cold); the quadrics' hit adjoints are checked in f64
#                         in the default lane (tests/test_optics_adjoints.py)
def test_ior_gradient_through_an_analytic_sphere(tmp_path):
    """A smooth glass ball (Mitsuba's analytic sphere) over a textured light: its IOR moves the refracted paths, whose
    hits on the sphere slide with their rays (core/quadrics.hit_adjoint). Attached PRB against finite differences,
    and a small spread over seeds (before the sphere had its hit adjoint: 90 ± 18 over four seeds, std 36; now
    88.7 ± 1.9 against central differences 87 ± 9)."""
    _write_inputs(str(tmp_path))
    sc = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 6, "rr_depth": 100},
        "sensors": [camera([0, 0, 3], [0, 0, 0], fov=30, w=32, h=32)],
        "bsdfs": {"glass": {"type": "dielectric", "int_ior": 1.5}},
        "shapes": [{"id": "ball", "type": "sphere", "bsdf": "glass", "to_world": [{"scale": 0.6}]},
                   {"id": "screen", "type": "rectangle", "to_world": [{"scale": 3.0}, {"translate": [0, 0, -1.5]}],
                    "emitter": {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}}]},
        base_dir=str(tmp_path))
    wts = np.random.default_rng(2).uniform(0, 1, (32, 32, 3)).astype(np.float32)
    g, f = projected_gradients(sc, "glass.int_ior", np.ones(1, np.float32), wts, 16, [11, 12, 13, 14], [21, 22, 23],
                               1e-2, method="prb_attached")
    assert_agree(g, f, "glass.int_ior")
    assert g.std(ddof=1) < 0.1 * abs(g.mean()), g


@pytest.mark.slow
@pytest.mark.extended   # ~100 s of compilation cold; the thin dielectric's adjoints are checked in f64 in the default
#                         lane (test_thin_dielectric_adjoints_vs_central_differences_f64)
def test_thin_dielectric_ior_gradient_vs_finite_differences(tmp_path):
    """A thin dielectric pane's IOR (int_ior, a pool parameter) moves its lobes' probabilities R and 1 − R: a tilted
    pane in front of a textured light, reflecting a dim sky; attached PRB against finite differences, detached
    PRB sees nothing (Dirac lobes)."""
    _write_inputs(tmp_path)
    light = {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}
    sc = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 4, "rr_depth": 100},
        "sensors": [camera([0, 0, 3], [0, 0, 0], fov=30, w=16, h=16)],
        "bsdfs": {"pane": {"type": "thindielectric", "int_ior": 1.5}},
        "shapes": [{"id": "pane", "type": "rectangle", "bsdf": "pane",
                    "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 50}}]},
                   {"id": "screen", "type": "rectangle", "to_world": [{"scale": 3.0}, {"translate": [0, 0, -1.5]}],
                    "emitter": light}],
        "emitters": [{"type": "constant", "radiance": 0.2}]}, base_dir=str(tmp_path))
    wts = np.random.default_rng(6).uniform(0, 1, (16, 16, 3)).astype(np.float32)
    g, f = projected_gradients(sc, "pane.int_ior", np.ones(1, np.float32), wts, 64, list(range(11, 19)),
                               list(range(21, 29)), 1e-2, method="prb_attached")
    mg, mf, se = assert_agree(g, f, "pane.int_ior")
    print(f"pane.int_ior: attached {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")
    assert mg < 0.0          # a higher IOR reflects more of the dim sky and passes less of the bright light
    det = tirender.render_grad(sc, wts, spp=4, seed=3, method="prb", progress=False)["pane.int_ior"]
    assert np.abs(det).max() == 0.0


@pytest.mark.slow
@pytest.mark.extended   # ~150 s cold (its own scene's kernels); the default lane checks the rough dielectric's IOR
# adjoint in f64 (tests/test_bsdfs.py, row adj_rd) and a whole-render IOR gradient on the dispersive glass
# (tests/test_dispersion_gradients.py)
def test_rough_glass_ior_gradient_vs_finite_differences(tmp_path):
    """A rough dielectric's IOR is differentiated by detached PRB (through F, the generalized half vector and the
    transmission factor; bsdfs/roughdielectric.py _f_grads): a rough glass slab over a textured light against
    finite differences."""
    _write_inputs(tmp_path)
    light = {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}
    sc = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 5, "rr_depth": 100},
        "sensors": [camera([0, 0, 3], [0, 0, 0], fov=30, w=24, h=24)],
        "bsdfs": {"rough": {"type": "roughdielectric", "roughness": 0.15, "int_ior": 1.5}},
        "shapes": [{"id": "top", "type": "rectangle", "bsdf": "rough"},
                   {"id": "bottom", "type": "rectangle", "bsdf": "rough",
                    "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, -0.3]}]},
                   {"id": "screen", "type": "rectangle", "to_world": [{"scale": 3.0}, {"translate": [0, 0, -1.5]}],
                    "emitter": light}],
        "emitters": [{"type": "constant", "radiance": 0.2}]}, base_dir=str(tmp_path))
    wts = np.random.default_rng(4).uniform(0, 1, (24, 24, 3)).astype(np.float32)
    g, f = projected_gradients(sc, "rough.int_ior", np.ones(1, np.float32), wts, 64, list(range(11, 19)),
                               list(range(21, 29)), 1e-2)
    mg, mf, se = assert_agree(g, f, "rough.int_ior")
    print(f"rough.int_ior: PRB {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")


def _rough_scene(tmp, case, w=24, dist="beckmann", light_scale=3.0):
    """A normal-mapped rough mirror (Beckmann α 0.05) reflecting a large textured light, or a
    normal-mapped rough glass slab (α 0.05, `dist`) over one; attached_roughness 0.1."""
    _write_inputs(tmp)
    light = {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}
    if case == "mirror":
        inner = {"type": "roughconductor", "roughness": 0.05}
        sh = [{"id": "screen", "type": "rectangle", "emitter": light,
               "to_world": [{"scale": 12.0}, {"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, 5]}]}]
        origin = [0.0, -1.2, 2.7]
    else:
        inner = {"type": "roughdielectric", "roughness": 0.05, "distribution": dist, "int_ior": 1.5}
        sh = [{"id": "bottom", "type": "rectangle", "bsdf": "glass",
               "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, -0.3]}]},
              {"id": "screen", "type": "rectangle", "to_world": [{"scale": light_scale}, {"translate": [0, 0, -1.5]}],
               "emitter": light}]
        origin = [0, 0, 3]
    bs = {"inner": inner, "glass": {"type": "dielectric", "int_ior": 1.5},
          "top": {"type": "normalmap", "bsdf": "inner", "normalmap": {"type": "bitmap", "data": "nm.npy"}}}
    return tirender.load_scene({"integrator": {"type": "path", "max_depth": 4, "rr_depth": 100,
                                               "attached_roughness": 0.1},
                                "sensors": [camera(origin, [0, 0, 0], fov=30, w=w, h=w)], "bsdfs": bs,
                                "shapes": [{"id": "top", "type": "rectangle", "bsdf": "top"}] + sh}, base_dir=str(tmp))


@pytest.mark.slow
@pytest.mark.extended   # 200 s of compilation cold; the default lane checks attached normal-map gradients against
#                         finite differences on glass (test_normalmap_gradients_vs_finite_differences) and the
#                         attached adjoints in f64 (test_adjoints_vs_central_differences_f64)
@pytest.mark.parametrize("case,pname", [("mirror", "top.normalmap"), ("mirror", "inner.roughness"),
                                        ("glass", "top.normalmap")])
def test_near_specular_gradients_vs_finite_differences(tmp_path, case, pname):
    """Near-specular attached sampling (bsdfs/halfwarp.py): whole-render gradients w.r.t. the texels
    of a normal map on a rough mirror / rough glass and w.r.t. the mirror's roughness agree with
    finite differences; detached PRB's estimate of the same is unbiased but much noisier."""
    sc = _rough_scene(tmp_path, case, w=16)
    rng = np.random.default_rng(1)
    wts = rng.uniform(0, 1, (16, 16, 3)).astype(np.float32)
    u = rng.normal(size=sc.params[pname].shape).astype(np.float32)
    h = 1e-2 if pname.endswith("normalmap") else 2e-3
    seeds = [11, 12, 13, 14, 15, 16]
    g, f = projected_gradients(sc, pname, u, wts, 16, seeds, [21, 22, 23, 24], h, method="prb_attached")
    mg, mf, se = assert_agree(g, f, f"{case} {pname}")
    print(f"{case} {pname}: attached {mg:.4g} ± {g.std(ddof=1) / np.sqrt(6):.2g}, FD {mf:.4g} (3 SE {3 * se:.2g})")
    if pname.endswith("normalmap") and case == "mirror":
        det = np.array([(tirender.render_grad(sc, wts, spp=16, seed=s, method="prb", progress=False)[pname] * u).sum()
                        for s in seeds])
        print(f"  detached {det.mean():.4g} ± {det.std(ddof=1) / np.sqrt(6):.2g}")
        assert 3.0 * g.std() < det.std()      # the lobe's movement, not its value's slope


def test_attached_is_deterministic(tmp_path):
    sc = _scene(tmp_path, w=16)
    wts = np.ones((16, 16, 3), np.float32)
    a = tirender.render_grad(sc, wts, spp=2, seed=5, method="prb_attached", progress=False)["top.normalmap"]
    b = tirender.render_grad(sc, wts, spp=2, seed=5, method="prb_attached", progress=False)["top.normalmap"]
    assert np.array_equal(a, b) and np.abs(a).max() > 0


@pytest.mark.extended   # 66 s of compilation cold (attached forward kernels); forward = reverse is checked in the
#                         default lane for detached PRB (tests/test_forward_mode.py) and geometry
def test_forward_mode_equals_reverse(tmp_path):
    """Forward mode through the attached passes (tirender.render_forward, method prb_attached): for
    one seed <w, J v> equals <∇<w, image>, v>; detached forward mode sees nothing of the map."""
    sc = _scene(tmp_path, w=16)
    rng = np.random.default_rng(4)
    w = rng.uniform(-1, 1, (16, 16, 3)).astype(np.float32)
    v = rng.normal(size=sc.params["top.normalmap"].shape)
    jv = tirender.render_forward(sc, {"top.normalmap": v}, spp=4, seed=6, method="prb_attached", progress=False)
    g = tirender.render_grad(sc, w, spp=4, seed=6, method="prb_attached", progress=False)["top.normalmap"]
    fwd, rev = float((w.astype(np.float64) * jv).sum()), float((g * v).sum())
    assert abs(rev) > 1e-2 and abs(fwd - rev) <= 2e-4 * abs(rev), (fwd, rev)
    det = tirender.render_forward(sc, {"top.normalmap": v}, spp=4, seed=6, progress=False)
    assert np.abs(det).max() == 0.0


@pytest.mark.slow
@pytest.mark.extended
def test_normalmap_glass_config_recovers_the_map(tmp_path):
    """The shipped config, shortened: attached PRB lowers the texel RMSE >= 3x, detached PRB does not
    move it."""
    res = {}
    for method in ("prb_attached", "prb"):
        out = tmp_path / method
        p = subprocess.run([sys.executable, "-m", "tirender", "optimize", os.path.join(ROOT, "configs", "normalmap_glass.yaml"),
                            "--out", str(out), "--set", f"optimize.method={method}"],
                           capture_output=True, text=True, cwd=str(tmp_path), timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        m = json.load(open(out / "metrics.json"))["params"]["top.normalmap"]
        res[method] = (m["rmse_start"], m["rmse_end"])
        assert (out / "sequence_view0.png").exists() and (out / "params" / "top.normalmap.png").exists()
    print(res)
    assert res["prb_attached"][1] * 3.0 <= res["prb_attached"][0]
    assert res["prb"][1] >= 0.95 * res["prb"][0]


# ---- f64 adjoint checks (child process) -------------------------------------------------------
def checks():
    """(name -> largest relative error over random cases); runs under fp = f64."""
    import tempfile

    import taichi as ti
    from tirender.bsdfs.base import BsdfCtx
    from tirender.bsdfs.registry import dispatch
    from tirender.core.fixed_point import grad_scale_for
    from tirender.core.math import vec2, vec3
    from tirender.emitters import registry as emitters
    from tirender.emitters.base import direction_record, env_record
    from tirender.launch import read_gradients, reset_gradients
    from tirender.walk import attached, vertex
    rng = np.random.default_rng(0)
    out = {}
    tmp = tempfile.mkdtemp()
    _write_inputs(tmp, tilt=0.3)
    # a smooth mesh with uvs (vertex normals interpolate, the frame turns with the hit)
    with open(os.path.join(tmp, "bent.obj"), "w") as fh:
        fh.write("v -1 -1 0.1\nv 1 -1 -0.2\nv 1 1 0.15\nv -1 1 -0.1\n"
                 "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                 "vn 0.3 0.1 1\nvn -0.2 0.25 1\nvn 0.1 -0.3 1\nvn -0.25 -0.1 1\n"
                 "f 1/1/1 2/2/2 3/3/3\nf 1/1/1 3/3/3 4/4/4\n")
    sc = tirender.load_scene({
        "sensors": [camera([0, 0, 5.0], [0, 0, 0], fov=40, w=8, h=8)],
        "bsdfs": {"glass": {"type": "dielectric", "int_ior": 1.5},
                  "metal": {"type": "conductor", "material": "Au"},
                  "nm": {"type": "normalmap", "bsdf": "glass", "normalmap": {"type": "bitmap", "data": "nm.npy"}}},
        "shapes": [{"id": "bent", "type": "obj", "filename": "bent.obj", "bsdf": "nm"},
                   {"id": "gold", "type": "rectangle", "bsdf": "metal", "to_world": [{"translate": [0, 0, -9.0]}]},
                   {"id": "slab", "type": "rectangle", "bsdf": "glass", "to_world": [{"translate": [0, 0, -10.0]}]},
                   {"id": "light", "type": "rectangle", "to_world": [{"translate": [0, 0, -3.0]}],
                    "emitter": {"type": "area", "radiance": {"type": "bitmap", "data": "rad.npy", "raw": True}}}],
        "emitters": [{"type": "envmap", "data": "rad.npy", "to_world": [{"rotate": {"axis": [1, 2, 0], "angle": 35}}]}]},
        base_dir=tmp)
    st = sc.bind()
    D = dispatch(sc.bsdf_levels)
    em = sc.em_mask
    rows = {r.id: i for i, r in enumerate(sc.desc.bsdfs)}

    # (1) n'(texels, uv) of the normal map
    @ti.kernel
    def k_nm(x: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        ctx = BsdfCtx(b=rows["nm"], uv=vec2(x[0], x[1]))
        return D.dirac_normal(st, ctx, vec3(0.3, -0.2, 0.9).normalized()).dot(vec3(g[0], g[1], g[2]))

    @ti.kernel
    def k_nm_adj(x: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        ctx = BsdfCtx(b=rows["nm"], uv=vec2(x[0], x[1]))
        r = D.dirac_normal_adjoint(st, ctx, vec3(0.3, -0.2, 0.9).normalized(), vec3(g[0], g[1], g[2]))
        out[0] = r[0]
        out[1] = r[1]

    tex0 = sc.params["nm.normalmap"].astype(np.float64)
    errs, errs_t = [], []
    for _ in range(100):
        x = rng.uniform(0.05, 0.95, 2)
        x = (np.floor(x * 8) + rng.uniform(0.1, 0.4, 2) + (rng.random(2) < 0.5) * 0.5) / 8   # off texel centres
        g = rng.normal(size=3)
        adj = np.zeros(2)
        reset_gradients(st, grad_scale_for(10.0))
        k_nm_adj(x, g, adj)
        errs.append(max_rel_err(adj, central_differences(lambda y: k_nm(y, g), x)))
        if len(errs_t) < 12:
            gt = read_gradients(sc, st)["nm.normalmap"].astype(np.float64).ravel()

            def val(t):
                sc.write_param_device("nm.normalmap", np.ascontiguousarray(t.ravel(), np.float64))
                return k_nm(x, g)
            fdt = central_differences(val, tex0.ravel())
            val(tex0.ravel())
            errs_t.append(float(np.abs(gt - fdt).max() / max(np.abs(fdt).max(), 1e-3)))
    out["normal map n' w.r.t. uv"] = {"max_rel_err": max(errs), "cases": len(errs)}
    out["normal map n' w.r.t. texels"] = {"max_rel_err": max(errs_t), "cases": len(errs_t) * tex0.size}

    # (2) the world lobe normal through the moving shading frame of a smooth mesh, w.r.t. the ray
    hit, hit_x = ray_hit(), ray_hit_x()

    @ti.kernel
    def k_lobe(x: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        tri, t, b1, b2, si = hit_x(st, x)
        v = vertex.surface_vertex(st, si, vec3(x[3], x[4], x[5]), vec3(0.0))
        return attached.lobe_normal(st, D, v).dot(vec3(g[0], g[1], g[2])) + ti.cast(si.shape, ti.f64) * 1e3

    @ti.kernel
    def k_lobe_adj(x: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        o = vec3(x[0], x[1], x[2])
        d = vec3(x[3], x[4], x[5])
        tri, t, b1, b2, si = hit(st, o, d)
        v = vertex.surface_vertex(st, si, d, vec3(0.0))
        g_n, g_uv = attached.lobe_normal_adjoint(st, D, v, tri, vec3(g[0], g[1], g[2]))
        g_o, g_d = attached.hit_adjoint(st, tri, t, b1, b2, o, d, vec3(0.0), g_n, g_uv)
        for i in ti.static(range(3)):
            out[i] = g_o[i]
            out[3 + i] = g_d[i]

    errs = []
    while len(errs) < 100:
        x = np.array([*rng.uniform(-0.8, 0.8, 2), 2.0, *(rng.normal(size=2) * 0.1), -1.0])
        g = rng.normal(size=3)
        if k_lobe(x, np.zeros(3)) != 0.0:
            continue
        adj = np.zeros(6)
        k_lobe_adj(x, g, adj)
        fd = central_differences(lambda y: k_lobe(y, g), x)
        if np.abs(fd).max() > 1e2:      # crossed the diagonal edge or a texel flip
            continue
        errs.append(max_rel_err(adj, fd))
    out["lobe normal (frame, normal map) w.r.t. the ray"] = {"max_rel_err": max(errs), "cases": len(errs)}

    # (3) emitters: textured area light w.r.t. uv, environment map w.r.t. the direction
    @ti.kernel
    def k_area(x: ti.types.ndarray(), w: ti.types.ndarray()) -> ti.f64:
        q = direction_record(st.shape_emitter[3], vec3(0.0), vec3(0.0, 0.0, 1.0), vec2(x[0], x[1]),
                             vec3(0.0, 0.0, -1.0), 1.0)
        return emitters.eval(st, em, q, vec3(0.0)).dot(vec3(w[0], w[1], w[2]))

    @ti.kernel
    def k_area_adj(x: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
        q = direction_record(st.shape_emitter[3], vec3(0.0), vec3(0.0, 0.0, 1.0), vec2(x[0], x[1]),
                             vec3(0.0, 0.0, -1.0), 1.0)
        g_uv, g_d = emitters.eval_grad(st, em, q, vec3(w[0], w[1], w[2]), vec3(0.0))
        out[0] = g_uv[0]
        out[1] = g_uv[1]

    @ti.kernel
    def k_env(x: ti.types.ndarray(), w: ti.types.ndarray()) -> ti.f64:
        d = vec3(x[0], x[1], x[2]).normalized()
        return emitters.eval(st, em, env_record(st.info_i[1], vec3(0.0), d), vec3(0.0)).dot(vec3(w[0], w[1], w[2]))

    @ti.kernel
    def k_env_adj(x: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
        d = vec3(x[0], x[1], x[2]).normalized()
        g_uv, g_d = emitters.eval_grad(st, em, env_record(st.info_i[1], vec3(0.0), d), vec3(w[0], w[1], w[2]),
                                      vec3(0.0))
        for i in ti.static(range(3)):
            out[i] = g_d[i]

    for name, kv, ka, n in (("area light Le w.r.t. uv", k_area, k_area_adj, 2),
                            ("environment map Le w.r.t. direction", k_env, k_env_adj, 3)):
        errs = []
        while len(errs) < 100:
            if n == 2:
                x = (np.floor(rng.uniform(0.05, 0.95, 2) * 16) + rng.uniform(0.1, 0.9, 2)) / 16
            else:
                x = rng.normal(size=3)
                x /= np.linalg.norm(x)
                if abs(x[1]) > 0.97:
                    continue
            w = rng.normal(size=3)
            adj = np.zeros(n)
            ka(x, w, adj)
            fd = central_differences(lambda y: kv(y, w), x)
            if np.abs(fd).max() > 1e3:     # a texel boundary (bilinear kink) inside the difference
                continue
            errs.append(max_rel_err(adj, fd))
        out[name] = {"max_rel_err": float(np.quantile(errs, 0.98)), "cases": len(errs)}

    # (4) Dirac lobes: ∂ ln value/∂cos θi (dielectric reflection / refraction, conductor)
    @ti.kernel
    def k_val(b: ti.i32, c: ti.f64, refl: ti.i32) -> ti.f64:
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        ctx = BsdfCtx(b=b, uv=vec2(0.5))
        bs = D.sample(st, ctx, wi, 0.0 if refl == 1 else 0.999999, vec2(0.5))
        p = bs.pdf if b == rows["glass"] else 1.0
        return ti.log(bs.weight[0] * p)

    @ti.kernel
    def k_dlog(b: ti.i32, c: ti.f64, refl: ti.i32) -> ti.f64:
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        return D.dirac_dlog(st, BsdfCtx(b=b, uv=vec2(0.5)), wi, refl == 1)[0]

    errs = []
    for b, refl in ((rows["glass"], 1), (rows["glass"], 0), (rows["metal"], 1)):
        for c in rng.uniform(0.1, 0.95, 40):
            fd = (k_val(b, c + 1e-6, refl) - k_val(b, c - 1e-6, refl)) / 2e-6
            errs.append(abs(k_dlog(b, c, refl) - fd) / max(abs(fd), 1e-3))
    out["Dirac lobe d ln value / d cos"] = {"max_rel_err": max(errs), "cases": len(errs)}

    # (5) a dielectric's IOR parameter: Φ = k ln(P w) + g_r η_ti of the sampled lobe (both sides, both lobes)
    @ti.kernel
    def k_phi(c: ti.f64, refl: ti.i32, k: ti.f64, g_r: ti.f64) -> ti.f64:
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        bs = D.sample(st, BsdfCtx(b=rows["glass"], uv=vec2(0.5)), wi, 0.0 if refl == 1 else 0.999999, vec2(0.5))
        res = 1e9                       # total internal reflection where refraction was asked for
        if bs.valid == 1 and (refl == 1) == (bs.wo[2] * c > 0.0):
            res = k * ti.log(bs.weight[0] * bs.pdf) + g_r / bs.eta
        return res

    @ti.kernel
    def k_phi_adj(c: ti.f64, refl: ti.i32, k: ti.f64, g_r: ti.f64):
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        D.dirac_ior_adjoint(st, BsdfCtx(b=rows["glass"], uv=vec2(0.5)), wi, refl == 1, k, g_r)

    ior0 = sc.params["glass.int_ior"].astype(np.float64).ravel()
    errs = []
    for c in np.concatenate([rng.uniform(0.1, 0.95, 40), -rng.uniform(0.1, 0.95, 50)]):
        for refl in (1, 0):
            k, g_r = rng.normal(size=2)

            def phi(x):
                sc.write_param_device("glass.int_ior", np.ascontiguousarray(x, np.float64))
                return k_phi(c, refl, k, g_r)
            fd = central_differences(phi, ior0)
            if phi(ior0) >= 1e9 or not np.all(np.abs(fd) < 1e6):
                continue
            reset_gradients(st, grad_scale_for(10.0))
            k_phi_adj(c, refl, k, g_r)
            adj = read_gradients(sc, st)["glass.int_ior"].astype(np.float64).ravel()
            errs.append(max_rel_err(adj, fd))
    out["dielectric IOR: d (k ln(P w) + g_r eta_ti) / d int_ior"] = {"max_rel_err": max(errs), "cases": len(errs)}
    out.update(_halfwarp_checks(rng, tmp))
    return out


def thin_checks():
    """thindielectric's attached adjoints (fp = f64): ∂ ln P/∂cos θi (``dlog``) and ∂(k ln P)/∂int_ior
    (``dirac_ior_adjoint``, with a g_r it must ignore: wo = −wi whatever η) of the sampled lobe, P = R or 1 − R,
    against central differences of ln(weight · pdf) of its sample; both lobes, both sides, η > 1 and η < 1."""
    import taichi as ti
    from tirender.bsdfs.base import BsdfCtx
    from tirender.bsdfs.registry import dispatch
    from tirender.core.fixed_point import grad_scale_for
    from tirender.core.math import vec2, vec3
    from tirender.launch import read_gradients, reset_gradients
    rng = np.random.default_rng(4)
    sc = tirender.load_scene({
        "sensors": [camera([0, 0, 5.0], [0, 0, 0], fov=40, w=4, h=4)],
        "bsdfs": {"pane": {"type": "thindielectric", "int_ior": 1.5},
                  "film": {"type": "thindielectric", "int_ior": 1.1, "ext_ior": 1.33}},
        "shapes": [{"id": "a", "type": "rectangle", "bsdf": "pane"},
                   {"id": "b", "type": "rectangle", "bsdf": "film", "to_world": [{"translate": [0, 0, -1.0]}]},
                   {"id": "light", "type": "rectangle", "to_world": [{"translate": [0, 0, 3.0]}],
                    "emitter": {"type": "area", "radiance": 1.0}}]})
    st = sc.bind()
    D = dispatch(sc.bsdf_levels)
    rows = {r.id: i for i, r in enumerate(sc.desc.bsdfs)}

    @ti.kernel
    def k_val(b: ti.i32, c: ti.f64, refl: ti.i32) -> ti.f64:
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        bs = D.sample(st, BsdfCtx(b=b, uv=vec2(0.5)), wi, 0.0 if refl == 1 else 0.999999, vec2(0.5))
        res = 1e9                       # the other lobe was sampled
        if bs.valid == 1 and (refl == 1) == (bs.wo[2] * c > 0.0):
            res = ti.log(bs.weight[0] * bs.pdf)
        return res

    @ti.kernel
    def k_dlog(b: ti.i32, c: ti.f64, refl: ti.i32) -> ti.f64:
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        return D.dirac_dlog(st, BsdfCtx(b=b, uv=vec2(0.5)), wi, refl == 1)[0]

    @ti.kernel
    def k_adj(b: ti.i32, c: ti.f64, refl: ti.i32, k: ti.f64, g_r: ti.f64):
        wi = vec3(ti.sqrt(1.0 - c * c), 0.0, c)
        D.dirac_ior_adjoint(st, BsdfCtx(b=b, uv=vec2(0.5)), wi, refl == 1, k, g_r)

    dl, di, scale = [], [], 0.0
    for name in ("pane", "film"):
        b = rows[name]
        pname = f"{name}.int_ior"
        ior0 = sc.params[pname].astype(np.float64).ravel()
        for c in np.concatenate([rng.uniform(0.1, 0.95, 30), -rng.uniform(0.1, 0.95, 30)]):
            for refl in (1, 0):
                if k_val(b, c, refl) >= 1e9:
                    continue
                fd = (k_val(b, c + 1e-6, refl) - k_val(b, c - 1e-6, refl)) / 2e-6
                dl.append(abs(k_dlog(b, c, refl) - fd) / max(abs(fd), 1e-3))
                k, g_r = rng.normal(size=2)

                def phi(x):
                    sc.write_param_device(pname, np.ascontiguousarray(x, np.float64))
                    return k * k_val(b, c, refl)
                fd = central_differences(phi, ior0)
                phi(ior0)
                reset_gradients(st, grad_scale_for(10.0))
                k_adj(b, c, refl, k, g_r)
                adj = read_gradients(sc, st)[pname].astype(np.float64).ravel()
                di.append(max_rel_err(adj, fd))
                scale = max(scale, float(np.abs(fd).max()))
    return {"thindielectric d ln P / d cos": {"max_rel_err": max(dl), "cases": len(dl)},
            "thindielectric d (k ln P) / d int_ior": {"max_rel_err": max(di), "cases": len(di), "scale": scale}}


def test_thin_dielectric_adjoints_vs_central_differences_f64():
    report = f64_child_report(__file__, "--f64-thin")
    assert len(report) == 2
    for name, r in report.items():
        assert r["cases"] >= 100, (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)
    assert report["thindielectric d (k ln P) / d int_ior"]["scale"] > 0.1


def _halfwarp_checks(rng, tmp):
    """Near-specular attached sampling (bsdfs/halfwarp.py through the dispatcher): the whole ∂/∂π and
    ∂/∂wi of Φ = <d_out, f(wi, wo(π))> + k ln J(π) + <g_wo, wo(π)>, wo and J from attached_warp of a
    sample taken at π0, against central differences of Φ (roughness, anisotropic roughness, normal-map
    texels; conductors, dielectrics from either side, reflection and refraction)."""
    import taichi as ti
    from tirender.bsdfs.base import BsdfCtx
    from tirender.bsdfs.halfwarp import HalfWarp
    from tirender.bsdfs.registry import dispatch
    from tirender.core.fixed_point import grad_scale_for
    from tirender.core.math import vec2, vec3
    from tirender.launch import read_gradients, reset_gradients
    nm = {"type": "bitmap", "data": "nm.npy"}
    bsdfs = {"rc": {"type": "roughconductor", "roughness": 0.3, "distribution": "ggx", "material": "Cu"},
             "rcb": {"type": "roughconductor", "alpha_u": 0.2, "alpha_v": 0.35, "distribution": "beckmann"},
             "rd": {"type": "roughdielectric", "roughness": 0.25, "distribution": "ggx", "int_ior": 1.5},
             "rdb": {"type": "roughdielectric", "roughness": 0.2, "int_ior": 1.33},
             "nrc": {"type": "normalmap", "bsdf": "rc", "normalmap": nm},
             "nrd": {"type": "normalmap", "bsdf": "rd", "normalmap": nm}}
    sc = tirender.load_scene({"sensors": [camera([0, 0, 5.0], [0, 0, 0], fov=40, w=8, h=8)], "bsdfs": bsdfs,
                              "shapes": [{"type": "rectangle", "bsdf": b} for b in bsdfs]}, base_dir=tmp)
    st = sc.bind()
    D = dispatch(sc.bsdf_levels)
    rows = {r.id: i for i, r in enumerate(sc.desc.bsdfs)}

    @ti.kernel
    def k_sample(b: ti.i32, x: ti.types.ndarray(), out: ti.types.ndarray()):
        ctx = BsdfCtx(b=b, uv=vec2(x[0], x[1]))
        wi = vec3(x[2], x[3], x[4])
        bs = D.sample(st, ctx, wi, x[5], vec2(x[6], x[7]))
        hw = D.attached_record(st, ctx, wi, bs.wo)
        out[0] = ti.cast(bs.valid, ti.f64)
        for i in ti.static(range(3)):
            out[1 + i] = bs.wo[i]
            out[4 + i] = hw.m[i]
        out[7] = hw.alpha[0]
        out[8] = hw.alpha[1]
        out[9] = ti.cast(hw.reflect, ti.f64)

    @ti.kernel
    def k_phi(b: ti.i32, x: ti.types.ndarray(), h: ti.types.ndarray(), w: ti.types.ndarray()) -> ti.f64:
        ctx = BsdfCtx(b=b, uv=vec2(x[0], x[1]))
        wi = vec3(x[2], x[3], x[4])
        hw = HalfWarp(m=vec3(h[4], h[5], h[6]), alpha=vec2(h[7], h[8]), reflect=ti.cast(h[9], ti.i32))
        wo, lnj = D.attached_warp(st, ctx, wi, hw)
        return (D.eval(st, ctx, wi, wo).dot(vec3(w[0], w[1], w[2])) + w[3] * lnj
                + wo.dot(vec3(w[4], w[5], w[6])))

    @ti.kernel
    def k_adj(b: ti.i32, x: ti.types.ndarray(), h: ti.types.ndarray(), w: ti.types.ndarray(),
              out: ti.types.ndarray()):
        ctx = BsdfCtx(b=b, uv=vec2(x[0], x[1]))
        wi = vec3(x[2], x[3], x[4])
        g_wi, g_uv = D.attached_adjoint(st, ctx, wi, vec3(h[1], h[2], h[3]), vec3(w[0], w[1], w[2]), w[3],
                                        vec3(w[4], w[5], w[6]))
        for i in ti.static(range(3)):
            out[i] = g_wi[i]

    params = {"rc": ["rc.roughness"], "rcb": ["rcb.alpha_u", "rcb.alpha_v"], "rd": ["rd.roughness"],
              "rdb": ["rdb.roughness"], "nrc": ["nrc.normalmap", "rc.roughness"], "nrd": ["nrd.normalmap", "rd.roughness"]}
    out = {}
    for name, pnames in params.items():
        errs = []
        n_refr = 0
        while len(errs) < 40:
            x = np.zeros(8)
            x[:2] = (np.floor(rng.uniform(0.05, 0.95, 2) * 8) + rng.uniform(0.2, 0.8, 2)) / 8   # off texel edges
            wi = rng.normal(size=3)
            wi[2] = abs(wi[2]) + 0.3
            if name in ("rd", "rdb", "nrd") and rng.random() < 0.4:
                wi[2] = -wi[2]                                          # arriving from inside
            x[2:5] = wi / np.linalg.norm(wi)
            x[5:] = rng.random(3)
            h = np.zeros(10)
            k_sample(rows[name], x, h)
            if h[0] == 0.0:
                continue
            w = np.concatenate([rng.normal(size=3), [rng.normal()], rng.normal(size=3)])
            base = k_phi(rows[name], x, h, w)
            if not np.isfinite(base):
                continue
            adj = np.zeros(3)
            reset_gradients(st, grad_scale_for(1e3))
            k_adj(rows[name], x, h, w, adj)
            grads = read_gradients(sc, st)
            fd_wi = central_differences(lambda y: k_phi(rows[name], np.concatenate([x[:2], y, x[5:]]), h, w), x[2:5])
            a_all, f_all = [adj], [fd_wi]
            for pn in pnames:
                v0 = np.asarray(sc.params[pn], np.float64).ravel()
                u = rng.normal(size=v0.shape)

                def val(t):
                    sc.write_param_device(pn, np.ascontiguousarray(v0 + t[0] * u, np.float64))
                    return k_phi(rows[name], x, h, w)
                f_all.append(central_differences(val, np.zeros(1)))
                val(np.zeros(1))
                a_all.append(np.array([float((grads[pn].astype(np.float64).ravel() * u).sum())]))
            a_all, f_all = np.concatenate(a_all), np.concatenate(f_all)
            if np.abs(f_all).max() > 1e4:          # a flip of the normal map or a side change inside the step
                continue
            n_refr += h[9] == 0.0
            errs.append(max_rel_err(a_all, f_all))
        if name in ("rd", "rdb", "nrd"):
            assert n_refr >= 5, (name, n_refr)
        out[f"attached half-vector warp ({name})"] = {"max_rel_err": max(errs), "cases": len(errs) * (3 + len(pnames))}
    return out


@pytest.mark.slow
def test_adjoints_vs_central_differences_f64():
    report = f64_child_report(__file__)
    assert len(report) == 13
    for name, r in report.items():
        assert r["cases"] >= 100, (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)


if __name__ == "__main__" and "--f64-thin" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(thin_checks()))
elif __name__ == "__main__" and "--f64" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(checks()))
