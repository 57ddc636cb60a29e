"""Mitsuba's sdfgrid shape (scene/sdfgrid.py, core/sdf.py): tight voxel boxes hold the surface, ray hits and normals
against a numpy reference that marches the trilinear function, the image against Mitsuba 3's by its Z-test
(skipped without mitsuba), and the one-line errors.

A differentiable grid (scene/sdf_body.py, ``<id>.grid``): it renders as the static grid does and, with new values, as
a static grid of those values (every voxel a primitive, the boxes refitted); whole-render gradients of its values
(the hit sliding on the moving surface, the normals turning with them: core/sdf.hit_adjoint) against central
differences with correlated random numbers, on a wavy sheet filling the view under a point light (no silhouette: the
boundary terms leave an SDF's out, as Mitsuba's projective integrators do), both normal modes."""
import functools
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError
from tirender.media.volfile import write_vol
from tirender.scene.sdfgrid import tight_boxes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mitsuba_suite as suite  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenes import moving_under_point_lights, ray_caster, sdf_sheet, xml_scene, xml_sensor  # noqa: E402


def _torus_grid(n=14, R=0.28, r=0.12):
    """Signed distances to a torus around the z axis through the cube's centre, on n^3 nodes ([z, y, x])."""
    x = np.linspace(0.0, 1.0, n)
    Z, Y, X = np.meshgrid(x, x, x, indexing="ij")
    q = np.hypot(X - 0.5, Y - 0.5) - R
    return (np.hypot(q, Z - 0.5) - r).astype(np.float32)


def _trilinear(f, q):
    """The clamped trilinear interpolation of f ([z, y, x]) at object points q (..., 3) and its gradient."""
    D, H, W = f.shape
    res = np.array([W, H, D]) - 1
    x = np.clip(q * res, 0, res)
    i = np.minimum(np.floor(x).astype(int), res - 1)
    w = x - i
    val = np.zeros(q.shape[:-1])
    grad = np.zeros(q.shape)
    for c in range(8):
        o = np.array([c & 1, (c >> 1) & 1, (c >> 2) & 1])
        fv = f[i[..., 2] + o[2], i[..., 1] + o[1], i[..., 0] + o[0]]
        ws = np.where(o, w, 1 - w)
        val += ws.prod(-1) * fv
        for a in range(3):
            others = np.prod([ws[..., b] for b in range(3) if b != a], 0)
            grad[..., a] += (1 if o[a] else -1) * others * fv * res[a]
    return val, grad


def _smooth_reference(f, q):
    """Mitsuba's smooth normal (sdfgrid.cpp smooth_sh, Hansson-Söderlund et al. 2022) at object points q (N, 3):
    the normalised trilinear gradients of the 8 voxels around q, each taken across its own voxel, blended."""
    D, H, W = f.shape
    res = np.array([W, H, D]) - 1
    sp = q * res
    v000 = np.round(sp).astype(int) - 1
    w = sp - v000 - 0.5
    ok = np.stack([(v000 + [c & 1, (c >> 1) & 1, (c >> 2) & 1] >= 0).all(1) for c in range(8)], 1)
    for a in range(3):
        side = np.array([(c >> a) & 1 for c in range(8)], bool)
        w[:, a] = np.where(~ok[:, ~side].any(1), 1.0, w[:, a])
        w[:, a] = np.where(~ok[:, side].any(1), 0.0, w[:, a])
    n = np.zeros_like(q)
    for c in range(8):
        o = np.array([c & 1, (c >> 1) & 1, (c >> 2) & 1])
        v = v000 + o
        g = np.zeros_like(q)
        for a in range(3):
            lo, hi = q.copy(), q.copy()
            lo[:, a] = v[:, a] / res[a]
            hi[:, a] = (v[:, a] + 1) / res[a]
            g[:, a] = (_trilinear(f, hi)[0] - _trilinear(f, lo)[0]) * res[a]
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        wt = np.prod(np.where(o, w, 1 - w), 1)
        n += np.where(ok[:, c:c + 1], wt[:, None] * g, 0.0)
    return n


def test_tight_boxes_hold_the_surface():
    """Every voxel with a sign change is a primitive; surface points found by bisection between node pairs and on
    random segments inside each voxel lie in its tight box."""
    f = _torus_grid()
    voxel, lo, hi = tight_boxes(f, chunk=300)          # several slabs
    D, H, W = f.shape
    c8 = np.stack([f[(c >> 2):D - 1 + (c >> 2), (c >> 1) & 1:H - 1 + ((c >> 1) & 1), c & 1:W - 1 + (c & 1)]
                   for c in range(8)], -1)
    want = ~((c8 > 0).all(-1) | (c8 < 0).all(-1))
    got = np.zeros_like(want)
    got[voxel[:, 2], voxel[:, 1], voxel[:, 0]] = True
    assert np.array_equal(got, want) and want.sum() > 50
    assert np.all(lo >= voxel - 1e-12) and np.all(hi <= voxel + 1 + 1e-12) and np.all(lo <= hi)
    rng = np.random.default_rng(1)
    res = np.array([W, H, D]) - 1
    inside = 0
    for v, a, b in zip(voxel, lo, hi):
        p0 = (v + rng.uniform(0, 1, (64, 3))) / res
        p1 = (v + rng.uniform(0, 1, (64, 3))) / res
        f0, _ = _trilinear(f, p0)
        f1, _ = _trilinear(f, p1)
        s = (f0 * f1) < 0
        lo_p, hi_p = p0[s], p1[s]
        flo = f0[s]
        for _ in range(40):
            mid = 0.5 * (lo_p + hi_p)
            fm, _ = _trilinear(f, mid)
            left = fm * flo > 0
            lo_p = np.where(left[:, None], mid, lo_p)
            flo = np.where(left, fm, flo)
            hi_p = np.where(left[:, None], hi_p, mid)
        x = 0.5 * (lo_p + hi_p) * res
        assert np.all(x >= a - 1e-6) and np.all(x <= b + 1e-6), (v, a, b)
        inside += len(x)
    assert inside > 1000


def _scene(tmp_path, f, to_world, normals="smooth", w=4, h=4, extra=""):
    write_vol(str(tmp_path / "g.vol"), f)
    body = f"""<shape type="sdfgrid" id="g"><string name="filename" value="g.vol"/>
      <string name="normals" value="{normals}"/>{to_world}<bsdf type="diffuse"/></shape>{extra}"""
    p = tmp_path / "s.xml"
    p.write_text(xml_scene(body, w, h))
    return p


_ROTATED = ('<transform name="to_world"><scale x="1.5" y="1.2" z="0.8"/><rotate x="1" y="1" angle="35"/>'
            '<translate x="-0.4" y="0.2" z="0.1"/></transform>')


@functools.lru_cache(maxsize=2)
def _marched_first_roots(f, shape, oo, dd):
    """(hit (n,), t (n,), -1 where none): the first root of the trilinear grid f (bytes of float32 `shape`) along the
    object-space rays oo + t dd (bytes of (n, 3) float64), t in [0, 6], by marching in steps of 1e-3 and bisecting;
    cached: both normal modes' tests cast the same rays at the same grid."""
    f = np.frombuffer(f, np.float32).reshape(shape)
    oo, dd = np.frombuffer(oo).reshape(-1, 3), np.frombuffer(dd).reshape(-1, 3)
    ts = np.linspace(0.0, 6.0, 6001)
    q = oo[:, None, :] + ts[None, :, None] * dd[:, None, :]
    box = np.all((q >= 0) & (q <= 1), -1)
    val, _ = _trilinear(f, np.clip(q, 0, 1))
    val = np.where(box, val, 1.0)
    change = (val[:, :-1] > 0) & (val[:, 1:] <= 0)
    hit = change.any(1)
    j = np.argmax(change, 1)
    a, b = ts[j], ts[j + 1]
    for _ in range(40):
        mid = 0.5 * (a + b)
        fm, _ = _trilinear(f, oo + mid[:, None] * dd)
        a, b = np.where(fm > 0, mid, a), np.where(fm > 0, b, mid)
    return hit, np.where(hit, 0.5 * (a + b), -1.0)


@pytest.mark.parametrize("normals", ["smooth", "analytic"])
def test_hits_and_normals_match_a_marched_reference(tmp_path, normals):
    """Rays from all around against a torus grid under a rotating, non-uniformly scaling to_world: tirender's
    closest hits (the cubic per voxel) equal the first root found by marching the trilinear function in fine steps
    and bisecting (|Δt| < 2e-4 of the object's size), with the same misses; the geometric normal is the trilinear
    gradient there, mapped as a normal; the shading normal is that normal ('analytic') or within 25° of it
    ('smooth': a blend over the 8 neighbouring voxels)."""
    f = _torus_grid()
    sc = tirender.load_scene(str(_scene(tmp_path, f, _ROTATED, normals)))
    st = sc.bind()
    m = np.asarray(sc.desc.shapes[0].implicit.to_world, np.float64)
    rng = np.random.default_rng(2)
    n = 1200
    centre = m[:3, :3] @ np.full(3, 0.5) + m[:3, 3]
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    aim = centre + rng.uniform(-0.5, 0.5, (n, 3))
    o = aim - 3.0 * d
    out = np.zeros((n, 22), np.float32)
    ray_caster(st)(o.astype(np.float32), d.astype(np.float32), out)
    inv = np.linalg.inv(m)
    oo = o @ inv[:3, :3].T + inv[:3, 3]
    dd = d @ inv[:3, :3].T
    hit, t_ref = _marched_first_roots(f.tobytes(), f.shape, oo.tobytes(), dd.tobytes())
    got = out[:, 0]
    assert hit.mean() > 0.2
    agree = (got >= 0) == hit
    assert agree.mean() > 0.997, agree.mean()              # grazing rays may differ at the marching step
    both = hit & (got >= 0)
    np.testing.assert_allclose(got[both], t_ref[both], atol=2e-4)
    ph = oo[both] + t_ref[both, None] * dd[both]
    _, g = _trilinear(f, ph)
    ng = g @ inv[:3, :3]                                   # normal matrix: the inverse transpose of to_world's
    ng /= np.linalg.norm(ng, axis=1, keepdims=True)
    cos = np.sum(out[both, 2:5] * ng, 1)
    assert np.quantile(cos, 0.01) > 0.999, np.quantile(cos, 0.01)
    cos_sh = np.sum(out[both, 5:8] * out[both, 2:5], 1)
    if normals == "analytic":
        np.testing.assert_allclose(cos_sh, 1.0, atol=1e-5)
    else:
        sh = _smooth_reference(f, ph) @ inv[:3, :3]
        sh /= np.linalg.norm(sh, axis=1, keepdims=True)
        assert np.quantile(np.sum(out[both, 5:8] * sh, 1), 0.01) > 0.9999 and cos_sh.mean() < 0.9999
    np.testing.assert_allclose(out[both, 19:22], o[both] + got[both, None] * d[both], atol=1e-5)


def _lit(tmp_path, normals, spp="$spp"):
    """The torus grid twice on a floor under an area light: as a shape with a scaling to_world, and as an instance
    of a shapegroup turned by a rotation (Mitsuba's advice for rotated grids)."""
    write_vol(str(tmp_path / "g.vol"), _torus_grid(20))
    grid = f'<shape type="sdfgrid"><string name="filename" value="g.vol"/><string name="normals" value="{normals}"/>'
    return f"""<scene version="3.0.0">
  <default name="spp" value="16"/>
  <integrator type="moment"><integrator type="path"><integer name="max_depth" value="3"/></integrator></integrator>
  {xml_sensor("0, -2.2, 2.2", "0, 0, 0.2", "0, 0, 1", 40, 48, 40, spp)}
  <shape type="rectangle"><transform name="to_world"><scale value="2"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.6"/></bsdf></shape>
  {grid}<transform name="to_world"><scale x="1.2" y="1.2" z="1.6"/><translate x="-1.1" y="-0.6" z="-0.3"/>
    </transform><bsdf type="diffuse"><rgb name="reflectance" value="0.2, 0.4, 0.8"/></bsdf></shape>
  <shape type="shapegroup" id="grp">{grid}<bsdf type="diffuse"><rgb name="reflectance" value="0.8, 0.4, 0.2"/></bsdf>
    </shape></shape>
  <shape type="instance"><ref id="grp"/><transform name="to_world"><translate x="-0.5" y="-0.5" z="-0.5"/>
    <rotate x="1" angle="70"/><scale value="1.3"/><translate x="0.5" y="0.1" z="0.5"/></transform></shape>
  <shape type="rectangle"><transform name="to_world"><scale value="0.8"/><rotate x="1" angle="180"/>
    <translate x="0.3" z="2.8"/></transform><emitter type="area"><rgb name="radiance" value="6"/></emitter></shape>
</scene>
"""


@pytest.mark.extended
@pytest.mark.parametrize("normals", ["smooth", "analytic"])
def test_sdfgrid_matches_mitsuba(tmp_path, normals):
    """Mitsuba's Z-test against Mitsuba 3's image (mitsuba_suite.ztest_file, 4096 spp, its per-pixel variance) of
    grids placed by a shape's to_world and by an instance's rotation, lit by an area light (shadows,
    interreflection). Extended (a path kernel compiled for SDF grids, 30 s): the default lane checks the hits and
    normals against the marched reference, and Mitsuba's suite runs various_shapes/ where the data has its files."""
    pytest.importorskip("mitsuba")
    f = tmp_path / "sdf.xml"
    f.write_text(_lit(tmp_path, normals))
    ok, details = suite.ztest_file(f)
    assert ok, details


def test_sdfgrid_errors(tmp_path):
    """One line naming the file and key: a grid without a sign change, two channels, an unknown normal mode, an
    emitting grid, a grid in a differentiable instance (its geometry is its values), a differentiable grid beyond the
    memory limit, a missing file name."""
    f = _torus_grid(6)
    write_vol(str(tmp_path / "pos.vol"), np.abs(f) + 0.1)
    write_vol(str(tmp_path / "two.vol"), np.stack([f, f], -1))
    write_vol(str(tmp_path / "g.vol"), f)

    def load(shape):
        p = tmp_path / "e.yaml"
        p.write_text("scene:\n  integrator: {type: path}\n  sensors: [{type: perspective, film: {width: 4, height: 4}}]\n"
                     f"  shapes:\n    - {shape}\n")
        with pytest.raises(ConfigError) as e:
            tirender.load_scene(str(p))
        return str(e.value)

    assert "never change sign" in load("{type: sdfgrid, id: s, filename: pos.vol}")
    assert "shapes.s.filename" in load("{type: sdfgrid, id: s, filename: two.vol}")
    assert "1 channel" in load("{type: sdfgrid, id: s, filename: two.vol}")
    assert "shapes.s.normals" in load("{type: sdfgrid, id: s, filename: g.vol, normals: flat}")
    assert "shapes.s.emitter" in load("{type: sdfgrid, id: s, filename: g.vol, emitter: {type: area}}")
    held = load("{type: shapegroup, id: grp, shapes: [{type: sdfgrid, id: s, filename: g.vol}]}\n"
                "    - {type: instance, id: i, shapegroup: grp, differentiable: true}")
    assert "differentiable" in held and "cannot hold an sdfgrid" in held
    from tirender import limits
    limits.set_max_memory("20K")      # every voxel of a differentiable grid is a primitive: its size is checked
    try:
        big = load("{type: sdfgrid, id: s, filename: g.vol, differentiable: true}")
    finally:
        limits.set_max_memory(None)
    assert "shapes.s" in big and "differentiable SDF grid of 6x6x6 nodes" in big and "memory limit" in big
    assert "'normals' belongs to sdfgrid" in load("{type: ply, id: s, filename: g.vol, normals: smooth}")
    p = tmp_path / "e.xml"
    p.write_text(xml_scene('<shape type="sdfgrid"/>'))
    with pytest.raises(ConfigError, match="needs a filename"):
        tirender.load_scene(str(p))


def _sheet_scene(tmp, normals="smooth", diff=True, name="sheet.vol"):
    """The wavy sheet (scenes.sdf_sheet) filling the view under a point light, a floor far to the side (one kernel
    specialisation with tests/test_point_lights_moving.py)."""
    return tirender.load_scene(moving_under_point_lights(tmp, {"point": 1.0}, floor_diff=diff, sheet_diff=diff,
                                                         sheet=name, normals=normals, in_view="sheet"),
                               base_dir=tmp)


def test_differentiable_grid_renders_as_the_static_one(tmp_path):
    """Every voxel a primitive, yet the same image as the static grid's (its tight boxes); new values render as a
    static grid loaded with them, and back."""
    f = sdf_sheet(str(tmp_path))
    static = tirender.render(_sheet_scene(str(tmp_path), diff=False), spp=4, seed=1, progress=False)
    sc = _sheet_scene(str(tmp_path))
    assert sc.params["g.grid"].shape == f.shape
    assert np.array_equal(tirender.render(sc, spp=4, seed=1, progress=False), static)
    f2 = f + 0.05 * np.linspace(-1, 1, f.shape[2])[None, None, :].astype(np.float32)   # tilted, moved
    write_vol(str(tmp_path / "sheet2.vol"), f2)
    sc.params["g.grid"] = f2
    want = tirender.render(_sheet_scene(str(tmp_path), diff=False, name="sheet2.vol"), spp=4, seed=1, progress=False)
    moved = tirender.render(sc, spp=4, seed=1, progress=False)
    assert np.abs(moved - want).max() < 1e-5 * max(float(want.max()), 1.0)
    assert np.abs(moved - static).max() > 0.01
    sc.params["g.grid"] = f
    assert np.array_equal(tirender.render(sc, spp=4, seed=1, progress=False), static)


@pytest.mark.parametrize("normals", ["analytic", "smooth"])
def test_grid_values_gradient_vs_finite_differences(tmp_path, normals):
    """Within 3 SE with smooth normals. Analytic normals are each voxel's gradient, which jumps across voxel faces:
    the lines where the shading jumps move over the image with the values and that boundary is not sampled (as in
    Mitsuba), 0.65 % of the derivative on this sheet under one light: within 3 SE + 1.5 %."""
    from gradcheck_util import assert_agree, projected_gradients
    sdf_sheet(str(tmp_path))
    sc = _sheet_scene(str(tmp_path), normals)
    wts = np.random.default_rng(1).uniform(0, 1, (20, 20, 3)).astype(np.float32)
    g0 = tirender.render_grad(sc, wts, spp=4, seed=9, progress=False)["g.grid"]
    touched = np.abs(g0) > 0
    assert touched.sum() >= 100 and not touched.all()       # the nodes around the surface, not the far ones
    x = np.linspace(0.0, 1.0, g0.shape[2])
    bumps = np.cos(np.pi * x)[None, None, :] * np.sin(np.pi * x)[None, :, None] * np.ones(g0.shape)
    for name, u in (("uniform", np.ones(g0.shape)), ("bumps", bumps)):
        u = (u * touched).astype(np.float32)
        g, _ = projected_gradients(sc, "g.grid", u, wts, 32, list(range(4)), [], 2e-3, method=None)
        _, fd = projected_gradients(sc, "g.grid", u, wts, 64, [], list(range(100, 104)), 2e-3)
        mg, mf = g.mean(), fd.mean()
        se = np.hypot(g.std(ddof=1), fd.std(ddof=1)) / 2.0           # 4 seeds each
        print(f"{normals} {name}: {mg:.4g} against central differences {mf:.4g} (3 SE {3 * se:.2g})")
        if normals == "smooth":
            assert_agree(g, fd, f"{normals} {name}")
        else:
            assert abs(mg - mf) <= 3 * se + 0.015 * abs(mf) and abs(mf) > 3 * se, (name, mg, mf, se)


@pytest.mark.extended
def test_grid_forward_mode_equals_reverse(tmp_path):
    """Forward mode (the tangent read from the values' own pool slice) equals reverse mode per seed."""
    sdf_sheet(str(tmp_path))
    sc = _sheet_scene(str(tmp_path))
    wts = np.random.default_rng(1).uniform(0, 1, (20, 20, 3)).astype(np.float32)
    u = np.random.default_rng(5).normal(size=sc.params["g.grid"].shape)
    rev = float((tirender.render_grad(sc, wts, spp=4, seed=3, progress=False)["g.grid"] * u).sum())
    tan = tirender.render_forward(sc, {"g.grid": u}, spp=4, seed=3, progress=False)
    fwd = float((np.asarray(tan, np.float64) * wts).sum())
    assert fwd == pytest.approx(rev, rel=1e-4, abs=1e-6), (fwd, rev)
