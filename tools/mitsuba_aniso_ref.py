"""Reference values of Mitsuba 3's anisotropic roughconductor / roughdielectric for
tests/test_anisotropic_mitsuba.py: ``eval`` and ``pdf`` at random local directions (scalar_rgb,
``mi.load_dict``, BSDFContext() = radiance mode). Writes tests/data/mitsuba_aniso.json.

    python3 tools/mitsuba_aniso_ref.py
"""
import json
import os

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
N_DIRS = 64
CASES = [   # (id, Mitsuba dict (also the tirender spec, with roughness keys as Mitsuba), direction domain)
    ("rc_ggx_aniso", {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.05, "alpha_v": 0.3,
                      "material": "Au"}, "upper"),
    ("rc_beck_aniso", {"type": "roughconductor", "distribution": "beckmann", "alpha_u": 0.4, "alpha_v": 0.1,
                       "material": "Cu"}, "upper"),
    ("rd_ggx_aniso", {"type": "roughdielectric", "distribution": "ggx", "alpha_u": 0.1, "alpha_v": 0.35,
                      "int_ior": 1.5, "ext_ior": 1.0}, "sphere"),
    ("rd_beck_aniso", {"type": "roughdielectric", "distribution": "beckmann", "alpha_u": 0.3, "alpha_v": 0.08,
                       "int_ior": 1.5, "ext_ior": 1.0}, "sphere"),
]


def directions(domain, seed):
    """(wi, wo) pairs, half of the sphere pairs in the reflection configuration."""
    rng = np.random.default_rng(seed)
    wi = rng.normal(size=(N_DIRS, 3))
    wo = rng.normal(size=(N_DIRS, 3))
    wi /= np.linalg.norm(wi, axis=1, keepdims=True)
    wo /= np.linalg.norm(wo, axis=1, keepdims=True)
    if domain == "upper":
        wi[:, 2], wo[:, 2] = np.abs(wi[:, 2]), np.abs(wo[:, 2])
    else:
        refl = np.arange(N_DIRS) % 2 == 0
        wo[refl, 2] = np.abs(wo[refl, 2]) * np.sign(wi[refl, 2])
    # near-specular pairs: wo near the mirror direction (where the anisotropic lobe lives)
    k = N_DIRS // 4
    mirror = wi[:k] * [-1, -1, 1]
    jitter = rng.normal(size=(k, 3)) * 0.15
    wo[:k] = (mirror + jitter) / np.linalg.norm(mirror + jitter, axis=1, keepdims=True)
    return wi, wo


def compute():
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    out = {"version": mi.__version__, "cases": []}
    for i, (cid, spec, domain) in enumerate(CASES):
        b = mi.load_dict(dict(spec))
        wi, wo = directions(domain, 100 + i)
        ev, pdf = [], []
        for a, o in zip(wi, wo):
            si = mi.SurfaceInteraction3f()
            si.wi = mi.Vector3f(*a)
            ev.append(list(b.eval(mi.BSDFContext(), si, mi.Vector3f(*o))))
            pdf.append(float(b.pdf(mi.BSDFContext(), si, mi.Vector3f(*o))))
        out["cases"].append({"id": cid, "spec": spec, "domain": domain, "wi": wi.tolist(), "wo": wo.tolist(),
                             "eval": ev, "pdf": pdf})
    return out


if __name__ == "__main__":
    path = os.path.join(ROOT, "tests", "data", "mitsuba_aniso.json")
    json.dump(compute(), open(path, "w"), indent=0)
    print("wrote", path)
