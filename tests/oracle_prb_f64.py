"""Independent oracle for PRB, run in float64 (a child process: Taichi's default float type must be
set before tirender's types are created).

On a tiny scene, the gradient of the *same* Monte Carlo estimator (same seed, hence the same random
numbers and paths) is computed by finite differences of whole renders (Richardson-extrapolated
central differences, O(h⁴)), and compared with PRB's gradient: they must agree to 1e-4 relative,
noise pattern included (PRB reproduces the gradient of the estimator, as AD would). Russian
roulette is off (its continuation probability depends on the throughput) and the parameters are
ones whose sampling densities do not depend on them (diffuse albedo, a texture, emitted radiance),
so the estimator is a smooth function of them. Prints a JSON dict name -> relative error.
"""
import json
import sys

import tirender.backend as backend

backend.init("cpu", fp="f64")

import numpy as np  # noqa: E402

import tirender  # noqa: E402
from tirender.api import render_grad  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_prb_gradients import _box_scene  # noqa: E402


def main():
    d = _box_scene()
    d["sensors"][0]["film"]["width"] = d["sensors"][0]["film"]["height"] = 10
    d["sensors"][0]["film"]["filter"] = {"type": "gaussian", "stddev": 0.5}
    sc = tirender.load_scene(d)
    rng = np.random.default_rng(1)
    sc.params["floor.reflectance"] = rng.uniform(0.2, 0.8, (6, 6, 3))
    w = rng.uniform(0.2, 1.0, (10, 10, 3)) / 100.0
    spp, seed = 4, 77
    g = render_grad(sc, w, spp=spp, seed=seed, progress=False)

    def J(name, v):
        sc.params[name] = v
        return float((tirender.render(sc, spp=spp, seed=seed, progress=False).astype(np.float64) * w).sum())

    out = {}
    for name, h in (("red.reflectance", 0.02), ("hidden.reflectance", 0.02), ("floor.reflectance", 0.02),
                    ("light.radiance", 0.5), ("lamp.intensity", 0.5)):
        v0 = sc.params[name].astype(np.float64)
        u = rng.uniform(0.5, 1.0, v0.shape)

        def D(hh):
            return (J(name, v0 + hh * u) - J(name, v0 - hh * u)) / (2 * hh)
        fd = (4 * D(h / 2) - D(h)) / 3
        sc.params[name] = v0
        prb = float((g[name] * u).sum())
        out[name] = {"prb": prb, "fd": fd, "rel": abs(prb - fd) / abs(fd)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
