"""Caustic design (issue 16): height-field shapes (displacement from a height texture, stencil
normals, BVH refit), the light tracer's attached gradients w.r.t. every height (splats that move with
the refracted light) against finite differences of the full render, and the optimisation config.
The f64 adjoint tests of each step are in test_optics_adjoints.py."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, projected_gradients
from scenes import camera
from tirender.errors import ConfigError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _bumps(n, amp=0.04):
    y, x = np.mgrid[0:n, 0:n] / n
    return (amp * np.sin(2.1 * np.pi * x + 0.3) * np.cos(1.7 * np.pi * y) + 0.5 * amp * x)[..., None].astype(np.float32)


def _scene(tmp_path, heights, res=17, w=32, beam="square", to_world=None):
    """A glass slab (height-field top, 0.1 thick) 1.5 above a diffuse receiver, a collimated beam from
    above, the camera between slab and receiver looking down."""
    np.save(os.path.join(tmp_path, "h.npy"), heights)
    d = {"integrator": {"type": "ptracer", "max_depth": 4},
         "sensors": [camera([0, 0, 0.3], [0, 0, -1], fov=70, w=w, h=w, up=[0, 1, 0], filt="gaussian")],
         "bsdfs": {"glass": {"type": "dielectric", "int_ior": 1.5}, "floor": {"type": "diffuse", "reflectance": 0.8}},
         "shapes": [{"id": "lens", "type": "heightfield", "resolution": [res, res], "thickness": 0.2,
                     "height": {"type": "bitmap", "data": "h.npy"}, "bsdf": "glass",
                     "to_world": to_world or [{"scale": 0.5}, {"translate": [0, 0, 0.6]}]},
                    {"id": "floor", "type": "rectangle", "to_world": [{"scale": 2}, {"translate": [0, 0, -0.9]}],
                     "bsdf": "floor"}],
         "emitters": [{"type": "beam", "direction": [0, 0, -1], "origin": [0, 0, 1.5], "radius": 0.45,
                       "aperture": beam, "irradiance": 1.0}]}
    return tirender.load_scene(d, base_dir=str(tmp_path))


def _bilinear_clamp(tex, u, v):
    """textures.tex_eval (bilinear, clamp) of a (h, w) array at uv (numpy reference)."""
    h, w = tex.shape
    x, y = u * w - 0.5, v * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = x - x0, y - y0
    cx = lambda i: np.clip(i, 0, w - 1)   # noqa: E731
    cy = lambda i: np.clip(i, 0, h - 1)   # noqa: E731
    return ((1 - fx) * (1 - fy) * tex[cy(y0), cx(x0)] + fx * (1 - fy) * tex[cy(y0), cx(x0 + 1)]
            + (1 - fx) * fy * tex[cy(y0 + 1), cx(x0)] + fx * fy * tex[cy(y0 + 1), cx(x0 + 1)])


def test_heightfield_displacement_normals_and_refit(tmp_path):
    """The displaced mesh is the height texture sampled at the vertices (scaled, translated); top
    vertex normals are the stencil's; after new heights the refitted BVH finds the brute-force
    closest hit for every ray; the mesh is closed (a solid for the glass) and writes as a PLY."""
    import taichi as ti
    from tirender.core.intersect import intersect
    from tirender.core.math import BIG, vec3
    from tirender.scene.bvh import intersect_brute_force
    from tirender.scene.mesh_io import load_mesh, save_ply
    H0 = _bumps(9)
    sc = _scene(tmp_path, H0, res=13)
    for heights in (H0, _bumps(9, amp=0.2)[::-1].copy()):
        sc.params["lens.height"] = heights
        m = sc.heightfield_mesh()
        W = 13
        top = m["positions"][:W * W]                    # the unique codes: top vertices first (2·g)
        i, j = np.arange(W * W) % W, np.arange(W * W) // W
        u, v = i / (W - 1), j / (W - 1)
        hz = _bilinear_clamp(heights[..., 0].astype(np.float64), u, v)
        want = np.stack([0.5 * (-1 + 2 * u), 0.5 * (-1 + 2 * v), 0.6 + 0.5 * hz], -1)
        np.testing.assert_allclose(top, want, atol=2e-6)
        # closed: every edge is shared by exactly two faces
        f = m["faces"]
        e = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
        _, counts = np.unique(e, axis=0, return_counts=True)
        assert np.all(counts == 2)
        st = sc.bind()
        rng = np.random.default_rng(3)
        n = 2000
        o = np.concatenate([rng.uniform(-0.7, 0.7, (n, 2)), rng.uniform(0.8, 1.2, (n, 1))], 1)
        d = np.concatenate([rng.normal(size=(n, 2)) * 0.4, -np.ones((n, 1))], 1)
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        hits = np.zeros(n, np.float32)

        @ti.kernel
        def k(o: ti.types.ndarray(), d: ti.types.ndarray(), out: ti.types.ndarray()):
            for r in range(o.shape[0]):
                tri, t, b1, b2, _inst = intersect(st, vec3(o[r, 0], o[r, 1], o[r, 2]), vec3(d[r, 0], d[r, 1], d[r, 2]), BIG)
                out[r] = t if tri >= 0 else -1.0

        k(o.astype(np.float32), d.astype(np.float32), hits)
        p0 = st.tri_p0.to_numpy()[:sc.n_triangles].astype(np.float64)
        v1 = p0 + st.tri_e1.to_numpy()[:sc.n_triangles]
        v2 = p0 + st.tri_e2.to_numpy()[:sc.n_triangles]
        t_ref, tri_ref = intersect_brute_force(o, d, p0, v1, v2)
        hit_ref = np.where(tri_ref >= 0, t_ref, -1.0)
        assert np.mean(hit_ref > 0) > 0.5
        np.testing.assert_allclose(hits, hit_ref, atol=1e-4)
        # the top's vertex normals: normalize(-∂h/∂x, -∂h/∂y, 1) by central differences (world: scale 0.5)
        code = st.tri_hf.to_numpy()[:sc.n_triangles]
        top_tris = (code >= 0) & ((code & 1) == 1)
        nrm = np.concatenate([getattr(st, f"tri_n{k}").to_numpy()[:sc.n_triangles][top_tris] for k in range(3)])
        hg = hz.reshape(W, W)
        hx = np.gradient(hg, 2.0 / (W - 1), axis=1)
        hy = np.gradient(hg, 2.0 / (W - 1), axis=0)
        ref = np.stack([-hx, -hy, np.ones_like(hx)], -1).reshape(-1, 3)
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        near = np.abs(nrm[:, None, :] - ref[None, :, :]).max(-1).min(-1)   # every stored normal is one of them
        assert len(nrm) == 3 * 2 * (W - 1) ** 2 and near.max() < 1e-5
    path = os.path.join(tmp_path, "lens.ply")
    save_ply(path, m["positions"], m["faces"])
    back = load_mesh(path)
    np.testing.assert_allclose(back["positions"], m["positions"])


SEEDS = list(range(6))


@pytest.mark.parametrize("texel_res", [8])
def test_caustic_gradients_match_fd(tmp_path, texel_res):
    """<w, image> of the light-traced caustic: attached gradients w.r.t. every height (a random
    direction) vs central differences of the full render with the same seeds (correlated random
    numbers, h = 2e-3 height units); detached PRB alone gives exactly 0 for heights (shown)."""
    sc = _scene(tmp_path, _bumps(texel_res))
    s = sc.sensors[0]
    w = np.random.default_rng(2).uniform(0.2, 1.0, (s.height, s.width, 3)).astype(np.float32)
    u = np.random.default_rng(5).uniform(-1.0, 1.0, sc.params["lens.height"].shape)
    g, f = projected_gradients(sc, "lens.height", u, w, 4, SEEDS, SEEDS, 2e-3)
    mg, mf, se = assert_agree(g, f, "lens.height")
    print(f"caustic <grad, u>: attached {mg:.4g} vs FD {mf:.4g} (± {se:.2g})")


def test_heightfield_config_errors(tmp_path):
    base = {"sensors": [camera([0, 0, 3], [0, 0, 0], w=8, h=8)], "emitters": [{"type": "constant"}]}

    def load(shape):
        return tirender.load_scene(dict(base, shapes=[shape]), base_dir=str(tmp_path))

    with pytest.raises(ConfigError, match="heightfield cannot be an emitter") as e:
        load({"id": "h", "type": "heightfield", "emitter": {"type": "area"}})
    assert "shapes.h.emitter" in str(e.value)
    with pytest.raises(ConfigError, match="belongs to heightfield shapes") as e:
        load({"id": "r", "type": "rectangle", "height": 0.1})
    with pytest.raises(ConfigError, match="resolution"):
        load({"id": "h", "type": "heightfield", "resolution": [1, 5]})
    with pytest.raises(ConfigError, match="thickness"):
        load({"id": "h", "type": "heightfield", "thickness": -1})
    with pytest.raises(ConfigError, match="singular"):
        load({"id": "h", "type": "heightfield", "to_world": [{"scale": [1, 0, 1]}]})
    sc = load({"id": "h", "type": "heightfield", "resolution": 4, "height": 0.25})        # an open surface
    assert sc.params["h.height"].shape == (1,) and sc.n_triangles == 2 * 9
    sc = load({"id": "h", "type": "heightfield", "resolution": 4, "thickness": 0.1})      # a closed slab
    assert sc.n_triangles == 2 * 2 * 9 + 4 * 3 * 2


@pytest.mark.slow
@pytest.mark.extended   # a whole-config run (50 s cold); the default lane checks the caustic gradients against
#                         finite differences (test_caustic_gradients_match_fd)
def test_caustic_config_optimizes(tmp_path):
    """`tirender optimize configs/caustic.yaml` (shortened): the loss falls, the height field is written
    as .npy and as a closed mesh (.ply), the intermediate caustics as one strip."""
    out = str(tmp_path / "out")
    r = subprocess.run([sys.executable, "-m", "tirender", "optimize", os.path.join(ROOT, "configs", "caustic.yaml"),
                        "--out", out, "--iters", "30", "--set", "optimize.save_every=10"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.load(open(os.path.join(out, "metrics.json")))
    assert m["final_loss"] < 0.5 * m["initial_loss"], m
    from tirender.scene.mesh_io import load_mesh
    mesh = load_mesh(os.path.join(out, "params", "lens.height.ply"))
    assert len(mesh["faces"]) == 4 * 96 * 96 + 8 * 96
    assert np.load(os.path.join(out, "params", "lens.height.npy")).shape == (16, 16, 1)
    for p in ("sequence_view0.png", "final/view0.png", "loss.png", "params/lens.height.png", "target_view0.png"):
        assert os.path.getsize(os.path.join(out, p)) > 0, p
