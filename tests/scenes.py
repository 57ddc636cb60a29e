"""Small scene dictionaries shared by the tests."""
import os

import numpy as np


def camera(origin, target, up=(0, 1, 0), fov=40.0, w=32, h=32, filt="box"):
    return {"type": "perspective", "fov": fov, "fov_axis": "x",
            "to_world": {"look_at": {"origin": list(origin), "target": list(target), "up": list(up)}},
            "film": {"width": w, "height": h, "filter": {"type": filt}}}


FLOOR_BSDF = {"type": "diffuse", "reflectance": [0.7, 0.6, 0.5]}


def floor(bsdf="floor"):
    """A 4 x 4 floor in y = 0 facing +y (the rectangle scaled by 2, turned about x), id "floor", BSDF `bsdf`."""
    return {"id": "floor", "type": "rectangle", "bsdf": bsdf,
            "to_world": [{"scale": 2}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]}


def furnace_plane(bsdf, tilt_deg=0.0, w=16, env=1.0):
    """A rectangle facing the camera (tilted by tilt_deg about x) inside a constant environment;
    narrow fov so that every pixel sees the plane at nearly the same angle."""
    return {
        "integrator": {"type": "path", "max_depth": 8, "rr_depth": 100},
        "sensors": [camera([0, 0, 10], [0, 0, 0], fov=2.0, w=w, h=w)],
        "bsdfs": {"mat": bsdf},
        "emitters": [{"type": "constant", "radiance": env}],
        "shapes": [{"id": "plane", "type": "rectangle", "bsdf": "mat",
                    "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": tilt_deg}}]}],
    }


def lit_plane(emitter_shape=None, point=None, w=24, rho=0.5, fov=60.0):
    """A diffuse floor (z = 0, normal +z) seen from above, lit by a point light or an area light shape."""
    sc = {
        "integrator": {"type": "path", "max_depth": 2},
        "sensors": [camera([0.3, -0.2, 3.0], [0.3, -0.2, 0], up=[0, 1, 0], fov=fov, w=w, h=w)],
        "bsdfs": {"floor": {"type": "diffuse", "reflectance": rho}},
        "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor", "to_world": [{"scale": 4.0}]}],
        "emitters": [],
    }
    if point is not None:
        sc["emitters"].append({"id": "lamp", "type": "point", "position": list(point[0]), "intensity": point[1]})
    if emitter_shape is not None:
        sc["shapes"].append(emitter_shape)
    return sc


def cornell_like(w=24, max_depth=4, extra_bsdfs=None, texture=None):
    """A tiny closed box with a ceiling light (fast to render, every path bounces)."""
    bs = {"white": {"type": "diffuse", "reflectance": [0.7, 0.7, 0.7]},
          "red": {"type": "diffuse", "reflectance": [0.6, 0.1, 0.1]},
          "green": {"type": "diffuse", "reflectance": [0.1, 0.5, 0.1]}}
    bs.update(extra_bsdfs or {})
    sh = [
        {"id": "floor", "type": "rectangle", "bsdf": "white", "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -1, 0]}]},
        {"id": "ceiling", "type": "rectangle", "bsdf": "white", "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 90}}, {"translate": [0, 1, 0]}]},
        {"id": "back", "type": "rectangle", "bsdf": "white", "to_world": [{"translate": [0, 0, -1]}]},
        {"id": "left", "type": "rectangle", "bsdf": "red", "to_world": [{"rotate": {"axis": [0, 1, 0], "angle": 90}}, {"translate": [-1, 0, 0]}]},
        {"id": "right", "type": "rectangle", "bsdf": "green", "to_world": [{"rotate": {"axis": [0, 1, 0], "angle": -90}}, {"translate": [1, 0, 0]}]},
        {"id": "light", "type": "rectangle", "to_world": [{"scale": 0.3}, {"rotate": {"axis": [1, 0, 0], "angle": 90}}, {"translate": [0, 0.99, 0]}],
         "emitter": {"type": "area", "radiance": [10.0, 9.0, 8.0]}},
    ]
    return {"integrator": {"type": "path", "max_depth": max_depth, "rr_depth": 100},
            "sensors": [camera([0, 0, 3.5], [0, 0, 0], fov=40, w=w, h=w)],
            "bsdfs": bs, "shapes": sh}


def polygon_irradiance(x, n, poly):
    """Lambert's formula: irradiance at points x (N,3) with normals n from a unit-radiance
    Lambertian polygon (vertices (K,3), counter-clockwise seen from the receiver side does not matter:
    the absolute value is taken). Returns (N,)."""
    E = np.zeros(len(x))
    K = len(poly)
    for i in range(K):
        a = poly[i][None] - x
        b = poly[(i + 1) % K][None] - x
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        b /= np.linalg.norm(b, axis=1, keepdims=True)
        th = np.arccos(np.clip((a * b).sum(1), -1, 1))
        g = np.cross(a, b)
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-30)
        E += th * (g * n).sum(1)
    return np.abs(E) / 2.0


def smoke_scene(integ="prbvolpath", albedo=0.8, max_depth=6, rr_depth=100, w=12):
    """An 8^3 density grid (random, majorant fixed above it) with a 4^3 RGB albedo grid and HG in a
    null-bounded cube; constant environment + sun; a diffuse floor below seen through the medium."""
    return {
        "integrator": {"type": integ, "max_depth": max_depth, "rr_depth": rr_depth},
        "sensors": [camera([0.3, 0.6, 3.5], [0, -0.2, 0], fov=40, w=w, h=w)],
        "media": {"smoke": {"type": "grid", "density": {"resolution": 8, "value": 0.5}, "scale": 2.5,
                            "albedo": {"resolution": 4, "value": [albedo] * 3}, "majorant": 4.0,
                            "phase": {"type": "hg", "g": 0.3}}},
        "shapes": [{"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "smoke",
                    "to_world": [{"scale": 0.8}]},
                   {"id": "floor", "type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": [0.6, 0.5, 0.4]},
                    "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}},
                                 {"translate": [0, -1.0, 0]}]}],
        "emitters": [{"id": "sky", "type": "constant", "radiance": [0.5, 0.6, 0.7]},
                     {"id": "sun", "type": "directional", "direction": [0.4, -1.0, -0.3], "irradiance": 3.0}],
    }


def xml_sensor(origin, target, up, fov, width, height, spp="$spp"):
    """A Mitsuba XML perspective sensor (box filter, independent sampler); vectors as "x, y, z" strings."""
    return f"""<sensor type="perspective">
    <float name="fov" value="{fov}"/>
    <transform name="to_world"><lookat origin="{origin}" target="{target}" up="{up}"/></transform>
    <film type="hdrfilm"><integer name="width" value="{width}"/><integer name="height" value="{height}"/>
      <rfilter type="box"/></film>
    <sampler type="independent"><integer name="sample_count" value="{spp}"/></sampler>
  </sensor>"""


def xml_scene(body, width=4, height=4):
    """The text of a Mitsuba 3 scene file: a perspective sensor with a width × height film, then body (XML)."""
    return (f'<scene version="3.0.0">\n    <sensor type="perspective"><film type="hdrfilm"><integer name="width" '
            f'value="{width}"/>\n        <integer name="height" value="{height}"/></film></sensor>\n{body}</scene>\n')


def ray_hit():
    """A ti.func hit(st, o, d) -> (tri, t, b1, b2, si): the closest hit of the ray o + t d on storage st and its
    SurfaceInteraction (made after tirender.init: core.math fixes the float type on import)."""
    import taichi as ti
    from tirender.core.interaction import make_interaction
    from tirender.core.intersect import intersect
    from tirender.core.math import BIG

    @ti.func
    def hit(st: ti.template(), o, d):
        tri, t, b1, b2, inst = intersect(st, o, d, BIG)
        return tri, t, b1, b2, make_interaction(st, tri, t, b1, b2, o, d, inst)
    return hit


def ray_hit_x():
    """ray_hit's hit for a ray given as one array x = (o, d) (6 values: an f64 oracle's input): hit_x(st, x)."""
    import taichi as ti
    from tirender.core.math import vec3
    hit = ray_hit()

    @ti.func
    def hit_x(st: ti.template(), x: ti.template()):
        return hit(st, vec3(x[0], x[1], x[2]), vec3(x[3], x[4], x[5]))
    return hit_x


def ray_caster(st):
    """A kernel cast(o (R, 3), d (R, 3), out (R, 22)) of rays against storage st; per ray: t (-1: a miss), the shape,
    then ng, n, uv, dp/du, dp/dv, the shading tangent s and p of its interaction (columns 2-4, 5-7, 8-9, 10-12,
    13-15, 16-18, 19-21)."""
    import taichi as ti
    from tirender.core.math import vec3
    hit = ray_hit()

    @ti.kernel
    def cast(o: ti.types.ndarray(), d: ti.types.ndarray(), out: ti.types.ndarray()):
        for r in range(o.shape[0]):
            tri, t, b1, b2, si = hit(st, vec3(o[r, 0], o[r, 1], o[r, 2]), vec3(d[r, 0], d[r, 1], d[r, 2]))
            out[r, 0] = t if tri >= 0 else -1.0
            out[r, 1] = si.shape
            for a in ti.static(range(3)):
                out[r, 2 + a] = si.ng[a]
                out[r, 5 + a] = si.n[a]
                out[r, 10 + a] = si.dpdu[a]
                out[r, 13 + a] = si.dpdv[a]
                out[r, 16 + a] = si.ss[a]
                out[r, 19 + a] = si.p[a]
            out[r, 8] = si.uv[0]
            out[r, 9] = si.uv[1]
    return cast


POINT_LIGHTS = ("point", "spot", "projector", "directional")


def point_lights(image, lit):
    """The four Dirac lights of the geometry-gradient tests under lights at a point (tests/test_point_lights_moving.py,
    test_sdfgrid.py): point, spot (with a texture `image`), projector (`image`) and directional, each at its strength
    times lit.get(kind, 0) (the others dark), so that every such test compiles one kernel specialisation."""
    look = {"spot": ([-0.2, 0.1, 1.8], [0.1, 0.0, 0.0]), "projector": ([0.2, -0.1, 1.6], [0.0, 0.1, 0.0])}

    def at(kind):
        return {"look_at": {"origin": look[kind][0], "target": look[kind][1], "up": [0, 1, 0]}}
    k = {kind: float(lit.get(kind, 0.0)) for kind in POINT_LIGHTS}
    return [{"type": "point", "position": [0.3, 0.2, 1.5], "intensity": 3.0 * k["point"]},
            {"type": "spot", "intensity": 6.0 * k["spot"], "cutoff_angle": 30.0, "beam_width": 12.0,
             "texture": {"type": "bitmap", "data": image}, "to_world": at("spot")},
            {"type": "projector", "irradiance": {"type": "bitmap", "data": image}, "scale": 2.0 * k["projector"],
             "fov": 70.0, "to_world": at("projector")},
            {"type": "directional", "direction": [-0.3, -0.2, -1.0], "irradiance": 2.0 * k["directional"]}]


def point_light_image(tmp):
    """A smooth 12 x 12 RGB pattern (img.npy in tmp) for point_lights' spot and projector; returns its path."""
    y, x = np.mgrid[0:12, 0:12] / 11.0
    img = np.stack([0.6 + 0.4 * np.sin(5 * x + 1), 0.6 + 0.4 * np.cos(4 * y), 0.5 + 0.3 * np.sin(3 * (x + y))], -1)
    path = os.path.join(tmp, "img.npy")
    np.save(path, img.astype(np.float32))
    return path


def sdf_sheet(tmp, n=14):
    """A wavy sheet's signed distances (z - 0.5 - bumps) on n^3 nodes, written to tmp/sheet.vol; returns them."""
    from tirender.media.volfile import write_vol
    x = np.linspace(0.0, 1.0, n)
    Z, Y, X = np.meshgrid(x, x, x, indexing="ij")
    f = (Z - 0.5 - 0.08 * np.sin(3 * X) * np.cos(2 * Y)).astype(np.float32)
    write_vol(os.path.join(tmp, "sheet.vol"), f)
    return f


def moving_under_point_lights(tmp, lit, floor_diff=False, sheet_diff=False, sheet="sheet.vol", normals="smooth",
                              in_view="floor", w=20):
    """A tilted diffuse floor (rectangle) and an SDF sheet (grid file `sheet` in tmp) under point_lights(lit), seen
    from above by `direct_projective`: the one `in_view` fills the view around the origin, the other lies far to the
    side (its edges off the film). Every test built on it shares one kernel specialisation."""
    floor_at, sheet_at = ([0, 0, 0], [40, 0, 0]) if in_view == "floor" else ([40, 0, 0], [0, 0, 0])
    return {
        "integrator": {"type": "direct_projective"},
        "sensors": [camera([0, 0, 2.5], [0, 0, 0], fov=30, w=w, h=w)],
        "shapes": [{"id": "floor", "type": "rectangle", "differentiable": floor_diff,
                    "to_world": [{"scale": 2.0}, {"rotate": {"axis": [1, 0.5, 0], "angle": 12}},
                                 {"translate": floor_at}],
                    "bsdf": {"type": "diffuse", "reflectance": [0.7, 0.6, 0.5]}},
                   {"id": "g", "type": "sdfgrid", "filename": sheet, "differentiable": sheet_diff, "normals": normals,
                    "to_world": [{"translate": [-0.5, -0.5, -0.5]}, {"scale": 2.0}, {"translate": sheet_at}],
                    "bsdf": {"type": "diffuse", "reflectance": [0.6, 0.55, 0.5]}}],
        "emitters": point_lights(point_light_image(tmp), lit)}
