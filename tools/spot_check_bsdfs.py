"""Spot check: one-material floor (point light + constant env), tirender vs Mitsuba 3 scalar_rgb, same
spp/depth; prints per-channel means and per-seed SEs as JSON.

    python3 tools/spot_check_bsdfs.py mi > mi.json; python3 tools/spot_check_bsdfs.py ti > ti.json
"""
import sys, json, numpy as np
which = sys.argv[1]
CASES = {
 "rp_beck": {"type": "roughplastic", "alpha": 0.15, "diffuse_reflectance": [0.2, 0.4, 0.7]},
 "rp_ggx04": {"type": "roughplastic", "alpha": 0.4, "distribution": "ggx", "diffuse_reflectance": [0.6, 0.5, 0.3]},
 "rc_au_beck": {"type": "roughconductor", "alpha": 0.2, "material": "Au"},
 "rc_ggx": {"type": "roughconductor", "alpha": 0.3, "distribution": "ggx", "material": "Cr"},
 "rd_beck": {"type": "roughdielectric", "alpha": 0.25, "int_ior": 1.5, "ext_ior": 1.0},
 "plastic": {"type": "plastic", "diffuse_reflectance": [0.3, 0.6, 0.2], "nonlinear": True},
 "mask": {"type": "mask", "opacity": 0.4, "bsdf": {"type": "roughconductor", "alpha": 0.3, "material": "Cu"}},
}
W, SPP, SEEDS = 32, 64, 4
cam_o, cam_t = [0.0, -2.5, 1.8], [0.0, 0.0, 0.0]
light = ([0.4, 0.3, 1.2], 3.0)
res = {}
for name in (sys.argv[2:] or CASES):
    b = dict(CASES[name])
    if which == "mi":
        import mitsuba as mi
        mi.set_variant("scalar_rgb")
        mb = {k: v for k, v in b.items()}
        for k in ("diffuse_reflectance",):
            if k in mb: mb[k] = {"type": "rgb", "value": mb[k]}
        sc = mi.load_dict({"type": "scene", "integrator": {"type": "path", "max_depth": 3},
            "sensor": {"type": "perspective", "fov": 50, "fov_axis": "x",
                       "to_world": mi.ScalarTransform4f().look_at(origin=cam_o, target=cam_t, up=[0, 0, 1]),
                       "film": {"type": "hdrfilm", "width": W, "height": W, "rfilter": {"type": "box"}},
                       "sampler": {"type": "independent", "sample_count": SPP}},
            "floor": {"type": "rectangle", "to_world": mi.ScalarTransform4f().scale(3.0), "bsdf": mb},
            "lamp": {"type": "point", "position": light[0], "intensity": {"type": "rgb", "value": light[1]}},
            "env": {"type": "constant", "radiance": {"type": "rgb", "value": 0.2}}})
        ms = [np.array(mi.render(sc, seed=s)).reshape(-1, 3).mean(0) for s in range(SEEDS)]
    else:
        import tirender
        tb = json.loads(json.dumps(b))
        for d in (tb, tb.get("bsdf", {})):
            if "alpha" in d:
                d["roughness"] = d.pop("alpha")
        spec = {"integrator": {"type": "path", "max_depth": 3},
                "sensors": [{"type": "perspective", "fov": 50, "fov_axis": "x",
                             "to_world": {"look_at": {"origin": cam_o, "target": cam_t, "up": [0, 0, 1]}},
                             "film": {"width": W, "height": W, "filter": {"type": "box"}}}],
                "bsdfs": {"m": tb},
                "emitters": [{"type": "point", "position": light[0], "intensity": light[1]},
                             {"type": "constant", "radiance": 0.2}],
                "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "m", "to_world": [{"scale": 3.0}]}]}
        sc = tirender.load_scene(spec)
        ms = [np.asarray(tirender.render(sc, spp=SPP, seed=100 + s)).reshape(-1, 3).mean(0) for s in range(SEEDS)]
    ms = np.array(ms)
    res[name] = {"mean": ms.mean(0).tolist(), "se": (ms.std(0, ddof=1) / np.sqrt(SEEDS)).tolist()}
print(json.dumps(res))
