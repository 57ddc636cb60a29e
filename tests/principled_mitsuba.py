"""Reference numbers of Mitsuba 3 (scalar_rgb) ``principled``, ``principledthin``, ``pplastic`` and ``hair`` for
tests/test_bsdfs.py: eval / pdf at random direction pairs and sample() at random (u1, u2), for the parameter sets
PRINCIPLED_SETS, THIN_SETS, PPLASTIC_SETS and HAIR_SETS. ``python3 tests/principled_mitsuba.py [plugin ...]`` rewrites
tests/data/<plugin>_mitsuba.json (needs mitsuba); ``compute()`` is also the live check."""
import json
import os

import numpy as np

PRINCIPLED_SETS = {
    "pr_basic": {"base_color": [0.8, 0.3, 0.2], "roughness": 0.4, "metallic": 0.3},
    "pr_all": {"base_color": [0.6, 0.5, 0.9], "metallic": 0.2, "specular": 0.6, "roughness": 0.3, "spec_tint": 0.4,
               "anisotropic": 0.5, "sheen": 0.3, "sheen_tint": 0.2, "clearcoat": 0.6, "clearcoat_gloss": 0.3,
               "spec_trans": 0.4},
    "pr_glass": {"base_color": [0.9, 0.9, 0.8], "spec_trans": 0.9, "eta": 1.5, "roughness": 0.2},
    "pr_inv": {"base_color": [0.3, 0.7, 0.5], "eta": 0.7, "spec_trans": 0.5, "roughness": 0.6, "anisotropic": 0.8,
               "clearcoat": 1.0, "clearcoat_gloss": 0.9, "metallic": 0.1, "sheen": 0.7},
}
# principledthin: every parameter, η above and below 1, a sheet without specular lobes (Mitsuba's switches off)
# and one without diffuse ones, non-default sampling rates
THIN_SETS = {
    "th_basic": {"base_color": [0.8, 0.3, 0.2], "roughness": 0.4, "spec_trans": 0.5, "eta": 1.4},
    "th_all": {"base_color": [0.6, 0.5, 0.9], "roughness": 0.3, "anisotropic": 0.5, "spec_trans": 0.4, "eta": 1.33,
               "spec_tint": 0.4, "sheen": 0.3, "sheen_tint": 0.2, "flatness": 0.6, "diff_trans": 0.7,
               "specular_reflectance_sampling_rate": 0.7, "diffuse_transmittance_sampling_rate": 1.5},
    "th_inv": {"base_color": [0.3, 0.7, 0.5], "eta": 0.7, "spec_trans": 0.8, "roughness": 0.6, "anisotropic": 0.8,
               "diff_trans": 1.2, "sheen": 0.7, "sheen_tint": 0.9, "spec_tint": 0.6, "flatness": 0.3,
               "specular_transmittance_sampling_rate": 2.0, "diffuse_reflectance_sampling_rate": 0.5},
    "th_diffuse": {"base_color": [0.2, 0.9, 0.4], "roughness": 0.2, "diff_trans": 1.5, "flatness": 1.0, "sheen": 0.5},
    "th_glass": {"base_color": [0.9, 0.8, 0.95], "spec_trans": 1.0, "roughness": 0.15, "eta": 1.5,
                 "anisotropic": 0.3},
}
# pplastic: Mitsuba's documentation example (a sharper lobe), GGX with both reflectances and int_ior / ext_ior, an
# anisotropic Beckmann lobe with eta given
PPLASTIC_SETS = {
    "pp_doc": {"diffuse_reflectance": [0.05, 0.03, 0.1], "alpha": 0.06},
    "pp_ggx": {"diffuse_reflectance": [0.5, 0.3, 0.2], "specular_reflectance": [0.9, 0.8, 0.7], "alpha": 0.3,
               "distribution": "ggx", "int_ior": 1.6, "ext_ior": 1.1},
    "pp_aniso": {"diffuse_reflectance": [0.2, 0.6, 0.4], "alpha_u": 0.1, "alpha_v": 0.4, "eta": 1.33},
}
# hair: the defaults (pigments), Mitsuba's two documentation examples (pigments; sigma_a with a scale), rough fibres
HAIR_SETS = {
    "hair_default": {},
    "hair_doc": {"eumelanin": 0.2, "pheomelanin": 0.4},
    "hair_sigma": {"sigma_a": [0.2, 0.25, 0.7], "scale": 2.0, "longitudinal_roughness": 0.5,
                   "azimuthal_roughness": 0.6, "scale_tilt": 5.0, "int_ior": 1.4},
    "hair_rough": {"sigma_a": [0.8, 0.8, 0.8], "longitudinal_roughness": 0.9, "azimuthal_roughness": 0.95,
                   "scale_tilt": -3.0},
}
SETS = {"principled": PRINCIPLED_SETS, "principledthin": THIN_SETS, "pplastic": PPLASTIC_SETS, "hair": HAIR_SETS}
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PATHS = {plugin: os.path.join(DATA, f"{plugin}_mitsuba.json") for plugin in SETS}
PATH = PATHS["principled"]
N_DIRS = 256
N_SAMPLES = 256


def inputs(seed=5):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(3, N_DIRS, 3))
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    wi, wo = v[0], v[1]
    # half of the pairs in the reflection configuration (same side), the rest anywhere
    same = np.arange(N_DIRS) < N_DIRS // 2
    wo[same] = np.where((wo[same, 2] * wi[same, 2] < 0)[:, None], wo[same] * [1, 1, -1], wo[same])
    u = rng.uniform(size=(N_SAMPLES, 3))
    wis = v[2][:N_SAMPLES]
    return wi, wo, wis, u


def mitsuba_spec(params, plugin="principled"):
    d = {"type": plugin}
    for k, x in params.items():
        d[k] = {"type": "rgb", "value": x} if isinstance(x, list) else x
    return d


def compute(plugin="principled"):
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    wi, wo, wis, u = inputs()
    out = {}
    ctx = mi.BSDFContext()
    for name, params in SETS[plugin].items():
        b = mi.load_dict(mitsuba_spec(params, plugin))
        ev, pdf, smp = [], [], []
        for a, c in zip(wi, wo):
            si = mi.SurfaceInteraction3f()
            si.wi = mi.Vector3f(*a)
            ev.append([float(x) for x in np.array(b.eval(ctx, si, mi.Vector3f(*c)))])
            pdf.append(float(b.pdf(ctx, si, mi.Vector3f(*c))))
        for a, uu in zip(wis, u):
            si = mi.SurfaceInteraction3f()
            si.wi = mi.Vector3f(*a)
            bs, w = b.sample(ctx, si, float(uu[0]), mi.Point2f(float(uu[1]), float(uu[2])))
            smp.append([float(x) for x in list(np.array(bs.wo)) + list(np.array(w))] + [float(bs.pdf), float(bs.eta)])
        out[name] = {"eval": ev, "pdf": pdf, "sample": smp}
    return out


def _short(v):
    """Nested lists of floats at float32's precision (9 significant digits: the stored files stay small)."""
    return [_short(x) for x in v] if isinstance(v, list) else float(f"{v:.9g}")


if __name__ == "__main__":
    import sys
    for plugin in sys.argv[1:] or list(PATHS):
        with open(PATHS[plugin], "w") as fh:
            json.dump({k: {a: _short(b) for a, b in r.items()} for k, r in compute(plugin).items()}, fh)
        print("wrote", PATHS[plugin])
