"""Reference values of Mitsuba 3's ``bumpmap`` for tests/test_bumpmap_mitsuba.py: ``eval`` and ``pdf``
at random uv and local directions (scalar_rgb, ``mi.load_dict``), with the shading point of
tests/bsdf_harness.py (dp/du, dp/dv, geometric normal; the shading frame is the identity, so
world = local and Mitsuba's s' (world dp/du against the local n') equals tirender's).
Writes tests/data/mitsuba_bumpmap.json.

Texture orientation: both renderers put v = 0 at the image's top row (textures.py), so Mitsuba gets
the same height array as tirender.

    python3 tools/mitsuba_bumpmap_ref.py
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from bsdf_harness import DPDU, DPDV, NG  # noqa: E402

N = 64
SCALE = 0.3
CASES = [   # (id, nested BSDF (Mitsuba dict = tirender spec), bumpmap flags, direction domain)
    ("bump_diffuse", {"type": "diffuse", "reflectance": 0.6}, {}, "upper"),
    ("bump_rc_aniso", {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.1, "alpha_v": 0.4,
                       "material": "Au"}, {}, "upper"),
    ("bump_rd", {"type": "roughdielectric", "alpha": 0.3, "int_ior": 1.5, "ext_ior": 1.0},
     {"use_shadowing_function": False}, "sphere"),
]


def height():
    """The tirender height array (H, W, 3), row 0 at the top, v = 0 at the bottom."""
    return np.random.default_rng(5).uniform(0.0, 1.0, (5, 6, 3)).astype(np.float32)


def inputs(seed):
    rng = np.random.default_rng(seed)
    uv = rng.uniform(0.0, 1.0, (N, 2))
    wi = rng.normal(size=(N, 3))
    wo = rng.normal(size=(N, 3))
    wi /= np.linalg.norm(wi, axis=1, keepdims=True)
    wo /= np.linalg.norm(wo, axis=1, keepdims=True)
    return uv, wi, wo


def directions(domain, seed):
    uv, wi, wo = inputs(seed)
    if domain == "upper":
        wi[:, 2], wo[:, 2] = np.abs(wi[:, 2]), np.abs(wo[:, 2])
    k = N // 4   # near-specular pairs
    mirror = wi[:k] * [-1, -1, 1]
    j = np.random.default_rng(seed + 1).normal(size=(k, 3)) * 0.2
    wo[:k] = (mirror + j) / np.linalg.norm(mirror + j, axis=1, keepdims=True)
    return uv, wi, wo


def compute():
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    bm = mi.Bitmap(np.ascontiguousarray(height()))
    out = {"version": mi.__version__, "scale": SCALE, "cases": []}
    for i, (cid, nested, flags, domain) in enumerate(CASES):
        b = mi.load_dict({"type": "bumpmap", "scale": SCALE, **flags,
                          "arbitrary": {"type": "bitmap", "bitmap": bm, "raw": True, "filter_type": "bilinear"},
                          "bsdf": dict(nested)})
        uv, wi, wo = directions(domain, 200 + i)
        ev, pdf = [], []
        for q, a, o in zip(uv, wi, wo):
            si = mi.SurfaceInteraction3f()
            si.uv = mi.Point2f(*q)
            si.dp_du, si.dp_dv = mi.Vector3f(*DPDU), mi.Vector3f(*DPDV)
            si.n = mi.Normal3f(*NG)
            si.sh_frame = mi.Frame3f(mi.Vector3f(1, 0, 0), mi.Vector3f(0, 1, 0), mi.Vector3f(0, 0, 1))
            si.wi = mi.Vector3f(*a)
            ev.append(list(b.eval(mi.BSDFContext(), si, mi.Vector3f(*o))))
            pdf.append(float(b.pdf(mi.BSDFContext(), si, mi.Vector3f(*o))))
        out["cases"].append({"id": cid, "uv": uv.tolist(), "wi": wi.tolist(), "wo": wo.tolist(), "eval": ev,
                             "pdf": pdf})
    return out


if __name__ == "__main__":
    path = os.path.join(ROOT, "tests", "data", "mitsuba_bumpmap.json")
    json.dump(compute(), open(path, "w"), indent=0)
    print("wrote", path)
