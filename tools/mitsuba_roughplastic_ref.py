"""Reference values of Mitsuba 3's ``roughplastic`` for tests/test_roughplastic_mitsuba.py.

    python3 tools/mitsuba_roughplastic_ref.py > tests/data/mitsuba_roughplastic.json

(mitsuba 3.9.1 from pip, variant scalar_rgb). For α ∈ {0.001, 0.05, 0.15, 0.4}, distribution ∈
{ggx, beckmann}, θi ∈ {0°, 45°, 85°}, η = 1.49 (int_ior 1.49, ext_ior 1):
  albedo_diffuse  the directional albedo of the diffuse lobe alone (specular_reflectance 0,
                  diffuse_reflectance 0.5): ∫ eval dω over the hemisphere by the midpoint rule in
                  μ = cos θo (the lobe does not depend on φ), N_MU points, × 2π
  eval            eval(wi, wo) (cosine included, red channel) of the full model
                  (diffuse_reflectance 0.5, specular_reflectance 1) at the directions WO
The same quadrature and directions are used by the test on tirender's side (``grid()``, ``WO``).
"""
import json

import numpy as np

ALPHAS = (0.001, 0.05, 0.15, 0.4)
THETAS = (0.0, 45.0, 85.0)
DISTS = ("ggx", "beckmann")
ETA = 1.49
N_MU = 400
WO = [(20.0, 0.0), (20.0, 180.0), (45.0, 180.0), (60.0, 90.0), (85.0, 30.0), (0.0, 0.0)]   # (θo, φo) degrees


def sph(theta, phi=0.0):
    t, p = np.radians(theta), np.radians(phi)
    return np.array([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)])


def grid():
    mu = (np.arange(N_MU) + 0.5) / N_MU
    wo = np.stack([np.sqrt(1.0 - mu * mu), np.zeros_like(mu), mu], -1)
    return wo, 2.0 * np.pi / N_MU     # albedo = sum(eval) * weight


def main():
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    ctx = mi.BSDFContext()
    si = mi.SurfaceInteraction3f()
    out = {"eta": ETA, "n_mu": N_MU, "wo": WO, "cases": []}
    wo_grid, w = grid()
    for dist in DISTS:
        for a in ALPHAS:
            diff = mi.load_dict({"type": "roughplastic", "alpha": a, "distribution": dist, "int_ior": ETA,
                                 "ext_ior": 1.0, "specular_reflectance": 0.0, "diffuse_reflectance": 0.5})
            full = mi.load_dict({"type": "roughplastic", "alpha": a, "distribution": dist, "int_ior": ETA,
                                 "ext_ior": 1.0, "specular_reflectance": 1.0, "diffuse_reflectance": 0.5})
            for th in THETAS:
                si.wi = mi.Vector3f(*sph(th))
                alb = sum(diff.eval(ctx, si, mi.Vector3f(*v))[0] for v in wo_grid) * w
                ev = [full.eval(ctx, si, mi.Vector3f(*sph(*d)))[0] for d in WO]
                out["cases"].append({"distribution": dist, "alpha": a, "theta": th,
                                     "albedo_diffuse": float(alb), "eval": [float(x) for x in ev]})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
