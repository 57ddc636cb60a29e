"""Mitsuba's analytic sphere, disk and cylinder (scene/implicit.py, core/quadrics.py): hits, normals, uv and dp/du,
dp/dv against closed forms in float64 (Mitsuba's formulas), emitter sampling of a sphere light against its
irradiance, the image against Mitsuba 3's by its Z-test (skipped without mitsuba), and the mesh fallbacks."""
import os
import sys

import numpy as np
import pytest

import tirender

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mitsuba_suite as suite  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenes import ray_caster, xml_scene, xml_sensor  # noqa: E402

_SHAPES = """
  <shape type="sphere" id="ball"><point name="center" x="0.3" y="-0.2" z="0.4"/><float name="radius" value="0.6"/>
    <transform name="to_world"><rotate x="{ax}" y="{ay}" z="{az}" angle="40"/><translate x="-1"/></transform>
    {bsdf}</shape>
  <shape type="disk" id="plate"><boolean name="flip_normals" value="true"/>
    <transform name="to_world"><scale x="0.7" y="1.1"/><rotate x="1" angle="-60"/><rotate z="1" angle="20"/>
      <translate x="1.1" z="0.2"/></transform>{bsdf}</shape>
  <shape type="cylinder" id="tube"><point name="p0" x="0" y="0.8" z="-0.5"/><point name="p1" x="0.2" y="1.0" z="0.7"/>
    <float name="radius" value="0.35"/>{bsdf}</shape>
  <shape type="cylinder" id="mirrored"><transform name="to_world"><scale x="-0.3" y="0.3" z="0.8"/>
    <translate y="-1.2" z="-0.3"/></transform>{bsdf}</shape>
  <shape type="sphere" id="inward"><transform name="to_world"><scale x="-0.25" y="0.25" z="0.25"/>
    <translate x="0.9" y="-1.1" z="-0.6"/></transform>{bsdf}</shape>
"""


def _reference(kind, m, flip, o, d):
    """Closed forms (float64) of Mitsuba's quadric kind placed by 4x4 m: (t, n, uv, dp/du, dp/dv) of rays o + t d
    (t = inf: a miss)."""
    inv = np.linalg.inv(m)
    M = m[:3, :3]
    lo, ld = o @ inv[:3, :3].T + inv[:3, 3], d @ inv[:3, :3].T
    n_ray = len(o)
    t = np.full(n_ray, np.inf)
    if kind == "sphere":
        c, R = m[:3, 3], np.linalg.norm(m[:3, 0])
        oc = o - c
        b, cc = np.sum(oc * d, 1), np.sum(oc * oc, 1) - R * R
        disc = b * b - cc
        sq = np.sqrt(np.maximum(disc, 0))
        for root in (-b - sq, -b + sq):
            t = np.where((disc >= 0) & (root > 0) & ~np.isfinite(t), root, t)
    elif kind == "disk":
        tt = -lo[:, 2] / ld[:, 2]
        q = lo + tt[:, None] * ld
        t = np.where((tt > 0) & (q[:, 0] ** 2 + q[:, 1] ** 2 <= 1), tt, t)
    else:
        a = ld[:, 0] ** 2 + ld[:, 1] ** 2
        b = 2 * (ld[:, 0] * lo[:, 0] + ld[:, 1] * lo[:, 1])
        cc = lo[:, 0] ** 2 + lo[:, 1] ** 2 - 1
        disc = b * b - 4 * a * cc
        sq = np.sqrt(np.maximum(disc, 0))
        for root in ((-b - sq) / (2 * a), (-b + sq) / (2 * a)):
            z = lo[:, 2] + root * ld[:, 2]
            t = np.where((disc >= 0) & (root > 0) & (z >= 0) & (z <= 1) & ~np.isfinite(t), root, t)
    hit = np.isfinite(t)
    p = o + np.where(hit, t, 0)[:, None] * d
    local = p @ inv[:3, :3].T + inv[:3, 3]
    x, y, z = local.T
    rd = np.hypot(x, y)
    phi = np.mod(np.arctan2(y, x), 2 * np.pi)
    cphi, sphi = x / np.maximum(rd, 1e-30), y / np.maximum(rd, 1e-30)
    zero = np.zeros_like(x)
    if kind == "sphere":
        n = (p - m[:3, 3]) / np.linalg.norm(m[:3, 0])
        zs = np.where(z >= 0, 1.0, -1.0)                         # Mitsuba's unit_angle_z (not unit length here)
        theta = 2 * np.arcsin(np.minimum(0.5 * np.sqrt(x * x + y * y + (z - zs) ** 2), 1))
        uv = np.stack([phi / (2 * np.pi), np.where(z < 0, np.pi - theta, theta) / np.pi], 1)
        du = np.stack([-y, x, zero], 1) * 2 * np.pi
        dv = np.stack([z * cphi, z * sphi, -rd], 1) * np.pi
    elif kind == "disk":
        n = np.tile(np.linalg.inv(M).T @ [0, 0, 1], (n_ray, 1))
        uv = np.stack([rd, phi / (2 * np.pi)], 1)
        du = np.stack([cphi, sphi, zero], 1)
        dv = np.stack([-sphi, cphi, zero], 1) * (2 * np.pi * rd)[:, None]
    else:
        uv = np.stack([phi / (2 * np.pi), z], 1)
        du = np.stack([-y, x, zero], 1) * 2 * np.pi
        dv = np.tile([0.0, 0.0, 1.0], (n_ray, 1))
    dpdu, dpdv = du @ M.T, dv @ M.T
    if kind == "cylinder":
        n = np.stack([x, y, zero], 1) @ np.linalg.inv(M)          # normal matrix: inverse transpose
    if kind == "sphere" and np.linalg.det(M) < 0:
        flip = not flip                                           # Mitsuba 3.9: inwards under a mirror
    n = n / np.linalg.norm(n, axis=1, keepdims=True) * (-1 if flip else 1)
    return t, n, uv, dpdu, dpdv


def test_hits_frames_and_uv_match_mitsubas_formulas(tmp_path):
    """Random rays at a sphere (centre, radius and a to_world rotating about an axis of length 2.3, which Mitsuba does not
    normalise: a shearing to_world, the sphere stays one), a flipped, sheared disk and two cylinders (p0, p1, radius; a
    mirroring to_world) and a mirrored sphere (inward normals, as Mitsuba 3.9's): the closest hit's t, which shape, the normals, uv, dp/du, dp/dv and the shading
    tangent (dp/du made orthogonal to n) equal the closed forms in float64 to float32 rounding."""
    p = tmp_path / "q.xml"
    p.write_text(xml_scene(_SHAPES.format(bsdf="", ax=1, ay=2, az=0.5)))
    sc = tirender.load_scene(str(p))
    shapes = sc.desc.shapes
    assert sc.n_triangles == 5 and all(s.implicit is not None for s in shapes)
    st = sc.bind()
    rng = np.random.default_rng(5)
    n = 4000
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o = rng.uniform(-1.3, 1.3, (n, 3)) - 4.0 * d
    out = np.zeros((n, 22), np.float32)
    ray_caster(st)(o.astype(np.float32), d.astype(np.float32), out)
    refs = [_reference(s.implicit and {2: "sphere", 3: "disk", 4: "cylinder"}[s.implicit.kind],
                       np.asarray(s.implicit.to_world), s.implicit.flip, o, d) for s in shapes]
    ts = np.stack([r[0] for r in refs], 1)
    first = np.argmin(ts, 1)
    t_ref = ts[np.arange(n), first]
    hit = np.isfinite(t_ref)
    assert 0.3 < hit.mean() < 0.9
    gap = np.sort(ts, 1)
    clear = ~hit | (gap[:, 1] - gap[:, 0] > 1e-3)             # not a near tie between two shapes
    assert np.array_equal((out[:, 0] >= 0)[clear], hit[clear])
    both = hit & clear & (out[:, 0] >= 0)
    np.testing.assert_allclose(out[both, 0], t_ref[both], rtol=2e-5, atol=2e-5)
    assert np.array_equal(out[both, 1].astype(int), first[both])
    seen = set()
    for i, ref in enumerate(refs):
        sel = both & (first == i)
        seen.add(i) if sel.sum() > 50 else None
        _, nr, uv, du, dv = (x[sel] for x in ref)
        np.testing.assert_allclose(out[sel, 2:5], nr, atol=2e-4)
        np.testing.assert_allclose(out[sel, 5:8], nr, atol=2e-4)
        wrap = np.abs(uv[:, 0] - out[sel, 8])                 # φ at the seam: 0 and 1 are the same point
        assert np.all((np.minimum(wrap, 1 - wrap) < 2e-4) | (np.abs(uv[:, 0] - out[sel, 8]) < 2e-4))
        np.testing.assert_allclose(out[sel, 9], uv[:, 1], atol=2e-4)
        scale = np.linalg.norm(du, axis=1, keepdims=True) + 1e-3
        np.testing.assert_allclose(out[sel, 10:13] / scale, du / scale, atol=5e-4)
        np.testing.assert_allclose(out[sel, 13:16], dv, atol=5e-4 * np.abs(dv).max())
        s = du - nr * np.sum(nr * du, 1, keepdims=True)
        s /= np.linalg.norm(s, axis=1, keepdims=True)
        np.testing.assert_allclose(out[sel, 16:19], s, atol=1e-3)
    assert seen == {0, 1, 2, 3, 4}


def test_sphere_light_irradiance(tmp_path):
    """A sphere light of radius R and radiance L lights a diffuse plane (albedo ρ) at distance D below its centre: the
    plane's radiance there is ρ L (R / D)² (the irradiance of a sphere, π L sin²θmax, over π); direct lighting samples
    the sphere uniformly by area, MIS with BSDF samples that hit it."""
    body = f"""<integrator type="direct"/>
  {xml_sensor("0, 0, 0.05", "0, 0, 0", "0, 1, 0", 2, 8, 8, 4096)}
  <shape type="rectangle"><transform name="to_world"><scale value="20"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.5"/></bsdf></shape>
  <shape type="sphere"><point name="center" x="0" y="0" z="3"/><float name="radius" value="0.5"/>
    <emitter type="area"><rgb name="radiance" value="4"/></emitter></shape>"""
    p = tmp_path / "light.xml"
    p.write_text(f'<scene version="3.0.0">\n{body}\n</scene>\n')
    img = tirender.render(tirender.load_scene(str(p)), spp=4096, seed=1, progress=False)
    want = 0.5 * 4.0 * (0.5 / 3.0) ** 2
    np.testing.assert_allclose(np.asarray(img)[..., :3].mean(), want, rtol=0.01)


def _lit(spp="$spp"):
    tex = ('<bsdf type="diffuse"><texture name="reflectance" type="checkerboard"><transform name="to_uv">'
           '<scale x="4" y="4"/></transform><rgb name="color0" value="0.8, 0.7, 0.2"/>'
           '<rgb name="color1" value="0.1, 0.2, 0.5"/></texture></bsdf>')
    return f"""<scene version="3.0.0">
  <default name="spp" value="16"/>
  <integrator type="moment"><integrator type="path"><integer name="max_depth" value="3"/></integrator></integrator>
  {xml_sensor("0, -4.5, 2.5", "0, 0, 0.1", "0, 0, 1", 45, 48, 36, spp)}
  <shape type="rectangle"><transform name="to_world"><scale value="3"/><translate z="-0.9"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.5"/></bsdf></shape>
  {_SHAPES.format(bsdf=tex, ax=0.43644, ay=0.87287, az=0.21822)}
  <shape type="sphere"><point name="center" x="0.2" y="0.1" z="2.2"/><float name="radius" value="0.3"/>
    <emitter type="area"><rgb name="radiance" value="12"/></emitter></shape>
  <emitter type="constant"><rgb name="radiance" value="0.2"/></emitter>
</scene>
"""


def test_quadrics_match_mitsuba(tmp_path):
    """Mitsuba's Z-test against Mitsuba 3's image (mitsuba_suite.ztest_file, 4096 spp, its per-pixel variance): the
    shapes above with checkerboard textures (uv), a sphere light (emitter sampling, MIS) and an environment."""
    pytest.importorskip("mitsuba")
    f = tmp_path / "q.xml"
    f.write_text(_lit())
    ok, details = suite.ztest_file(f)
    assert ok, details


def test_meshes_when_asked_for(tmp_path):
    """A tessellation is used where one is asked for: an explicit resolution, or differentiable geometry (the
    geometry gradients move vertices); the analytic shape otherwise. A sphere under a non-uniform scale stays a
    sphere (Mitsuba's) with a warning."""
    p = tmp_path / "m.yaml"
    p.write_text("scene:\n  integrator: {type: path}\n  sensors: [{type: perspective, film: {width: 4, height: 4}}]\n"
                 "  shapes:\n    - {type: sphere, id: a}\n    - {type: sphere, id: b, resolution: 16}\n"
                 "    - {type: sphere, id: c, differentiable: true, resolution: 8}\n"
                 "    - {type: disk, id: d, to_world: {scale: [1, 2, 1]}}\n"
                 "    - {type: sphere, id: e, to_world: {scale: [1, 2, 1]}}\n")
    with pytest.warns(UserWarning, match="stays a sphere"):
        sc = tirender.load_scene(str(p))
    kinds = [s.implicit is not None for s in sc.desc.shapes]
    assert kinds == [True, False, False, True, True]
    assert len(sc.desc.shapes[1].faces) > 100 and "c.center" in sc.params


def test_xml_rotation_keeps_the_axis_length(tmp_path):
    """Mitsuba's XML <rotate> does not normalise its axis (dr::rotate: Rodrigues' formula with the axis as given),
    so an axis of length 2.3 also scales and shears; tirender's to_world is Mitsuba's."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    p = tmp_path / "r.xml"
    p.write_text(xml_scene('<shape type="rectangle" id="r"><transform name="to_world"><rotate x="1" y="2" z="0.5" '
                           'angle="40"/></transform></shape>'))
    sc = tirender.load_scene(str(p))
    want = np.array(mi.ScalarTransform4f().rotate([1, 2, 0.5], 40).matrix)
    got = sc.desc.shapes[0].positions.astype(np.float64)       # the rectangle's corners (±1, ±1, 0) moved
    corners = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float64)
    np.testing.assert_allclose(got, corners @ want[:3, :3].T, atol=1e-5)
