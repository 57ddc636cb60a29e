"""tirender vs Mitsuba 3 parity: render every XML scene of benchmarks/parity/scenes with both
renderers from the same file and compare images and PRB gradients.

    export DRJIT_LIBLLVM_PATH=/usr/lib/x86_64-linux-gnu/libLLVM-19.so
    python3 benchmarks/parity/run.py [--scenes a,b] [--res 64] [--spp 32] [--seeds 4]
                                     [--grad-spp 16] [--no-grad] [--out benchmarks/results/parity.md]

Per scene, per renderer: `seeds` images at `spp` (independent seeds).
- means: per-channel image means m_k per seed; mean ± SE over seeds; z = Δ / sqrt(SE_ti² + SE_mi²)
  (pass: Welch's two-sided p ≥ 0.0027 for every channel, the 3σ tail of a normal: z is Student-t
  distributed with the Welch–Satterthwaite degrees of freedom, since each SE is itself estimated from
  a few seeds; at 4 seeds a plain |z| ≤ 3 fails a fair comparison several times per suite run);
- RMSE: between the two seed-averaged images, against the combined per-pixel noise of both,
  sqrt(mean(σ²_ti + σ²_mi)) with σ² = per-pixel variance over seeds / seeds (pass: ratio ≤ 1.2);
- gradients: d/dθ Σ w·image with fixed random weights w (uniform [0, 1), seed 0), θ summed over
  its components (a directional derivative along all-ones), PRB in both (Mitsuba: llvm_ad_rgb,
  integrator prb / prbvolpath), mean ± SE over seeds (pass: the same Welch test, and the same sign
  where both means are at least 3 SE from 0 — the sign of a mean within noise of 0 says nothing).
A scene using a model tirender does not have (yet) is reported as "model missing: <error>".
"""
import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCENES_DIR = os.path.join(HERE, "scenes")
sys.path.insert(0, ROOT)

# scene -> the parameters differentiated: Mitsuba key, or "mitsuba key=tirender key" where the
# names do not resolve by themselves (scene.params.resolve, docs/mitsuba.md); "tirender key@r,c;r,c"
# sums the gradient over those texels only (a checkerboard's colour is two texels of a 2x2 bitmap).
SCENES = {
    "diffuse_area": ["floor.bsdf.reflectance.value", "ball.bsdf.reflectance.value", "light.emitter.radiance.value"],
    "conductor": ["floor.bsdf.alpha.value", "ball.bsdf.specular_reflectance.value", "sky.radiance.value"],
    "dielectric": ["floor.bsdf.reflectance.value", "light.emitter.radiance.value", "slab.bsdf.alpha.value"],
    "roughplastic": ["floor.bsdf.diffuse_reflectance.value", "floor.bsdf.alpha"],
    "composites": ["floor.bsdf.weight.value", "floor.bsdf.bsdf_0.reflectance.value",
                   "card.bsdf.brdf_0.reflectance.value=card.bsdf.reflectance"],
    "point_directional": ["bulb.intensity.value", "sun.irradiance.value", "ball.bsdf.reflectance.value"],
    "tent_filter": ["ball.bsdf.reflectance.value", "light.emitter.radiance.value"],
    "envmap": ["ball.bsdf.reflectance.value", "floor.bsdf.reflectance.value"],
    "texture_rectangle": ["board.bsdf.reflectance.data", "board2.bsdf.reflectance.data", "sky.radiance.value"],
    "texture_meshes": ["texmat.reflectance.data", "sky.radiance.value"],
    "texture_wrap_volume": ["board.bsdf.reflectance.data", "board2.bsdf.reflectance.data",
                            "blob.bsdf.reflectance.volume.data", "floor.bsdf.reflectance.value"],
    "homogeneous": ["fog.sigma_t.value.value", "fog.albedo.value.value", "floor.bsdf.reflectance.value"],
    "heterogeneous": ["smoke.sigma_t.data", "smoke.albedo.value.value", "floor.bsdf.reflectance.value"],
    "thinlens": ["floor.bsdf.reflectance.value", "ball.bsdf.reflectance.value", "far.bsdf.reflectance.value"],
    "orthographic": ["floor.bsdf.reflectance.value", "sky.radiance.value", "light.emitter.radiance.value"],
    "spectra": ["floor.bsdf.reflectance.value", "ball.bsdf.reflectance.value", "light.emitter.radiance.value",
                "fill.emitter.radiance.value"],
    # models other branches add; "model missing" until they are merged
    "plastic": ["floor.bsdf.diffuse_reflectance.value", "light.emitter.radiance.value"],
    "principled": ["ball.bsdf.base_color.value", "ball.bsdf.roughness.value"],
    "bumpmap": ["floor.bsdf.nested_bsdf.reflectance.value=floor.bsdf.reflectance", "light.emitter.radiance.value"],
    "mask": ["card.bsdf.opacity.value", "floor.bsdf.reflectance.value",
             "card.bsdf.nested_bsdf.reflectance.value=card.bsdf.reflectance"],
    "spot": ["spot.intensity.value", "floor.bsdf.reflectance.value"],
    "projector": ["proj.irradiance.data", "proj.scale", "spot.texture.data", "spot.intensity.value"],
    "beckmann": ["floor.bsdf.alpha.value", "sky.radiance.value"],
    "anisotropic": ["floor.bsdf.alpha_u.value", "floor.bsdf.alpha_v.value"],
    "pplastic": ["floor.bsdf.diffuse_reflectance.value", "floor.bsdf.alpha.value", "ball.bsdf.eta.value"],
    "hair": ["fibres.bsdf.longitudinal_roughness", "fibres.bsdf.azimuthal_roughness", "fibres.bsdf.scale_tilt",
             "fibres.bsdf.eumelanin", "fibres.bsdf.eta"],
    "checkerboard": ["floor.bsdf.reflectance.color0.value=floor.reflectance@0,0;1,1",
                     "floor.bsdf.reflectance.color1.value=floor.reflectance@0,1;1,0", "light.emitter.radiance.value"],
}
CI_SUBSET = ("diffuse_area", "point_directional", "tent_filter")
# Mitsuba renders a scene's image with its own integrator unless named here: its ``path`` drops
# camera paths whose every interaction was a mask pass-through into the void (valid_ray), its
# ``prb`` (and tirender) keep them (tirender/bsdfs/mask.py has the size of the difference).
MITSUBA_IMAGE_INTEGRATOR = {"mask": "prb"}
# gradients that differ from Mitsuba's by design: (scene, Mitsuba key) -> why. Reported, not counted.
BY_DESIGN = {("mask", "card.bsdf.opacity.value"):
             "Mitsuba's prb lacks the pass-through term -L_through/(1-o); tirender's matches FD "
             "(tests/test_prb_gradients.py::test_prb_matches_fd_mask_opacity)"}


def _split(p):
    return p.split("=", 1) if "=" in p else (p, p)


def weights(h, w):
    return np.random.default_rng(0).random((h, w, 3)).astype(np.float32)


# -- tirender --------------------------------------------------------------------------------------
def tirender_run(path, defines, spp, seeds, params, grad_spp, grad=True):
    import tirender
    from tirender.errors import ConfigError
    try:
        scene = tirender.load_scene(path, defines=defines)
    except ConfigError as e:
        return {"missing": str(e)}
    imgs = np.stack([tirender.render(scene, spp=spp, seed=100 + s, progress=False) for s in range(seeds)])
    out = {"imgs": imgs, "grads": {}}
    if grad:
        w = weights(*imgs.shape[1:3])
        sel = [_split(p)[1].split("@") + [None] for p in params]
        names = [scene.params.resolve(t[0]) for t in sel]
        texels = [None if t[1] is None else [tuple(map(int, rc.split(","))) for rc in t[1].split(";")] for t in sel]
        for n in names:
            if n not in scene.params:
                raise KeyError(f"tirender has no parameter for '{n}' (has: {scene.params.keys()})")
        g = {p: [] for p in params}
        for s in range(seeds):
            gr = tirender.render_grad(scene, w, spp=grad_spp, seed=200 + s, progress=False)
            for p, n, tx in zip(params, names, texels):
                v = gr[n] if tx is None else np.stack([gr[n][r, c] for r, c in tx])
                g[p].append(float(np.sum(v)))
        out["grads"] = {_split(p)[0]: np.array(g[p]) for p in params}
    return out


# -- Mitsuba ---------------------------------------------------------------------------------------
def mitsuba_run(path, defines, spp, seeds, params, grad_spp, grad=True, variant="llvm_ad_rgb"):
    import drjit as dr
    import mitsuba as mi
    mi.set_variant(variant)
    scene = mi.load_file(path, **defines)
    t, md = _integrator(path, defines)
    name = os.path.splitext(os.path.basename(path))[0]
    image_integ = None
    if name in MITSUBA_IMAGE_INTEGRATOR:
        image_integ = mi.load_dict({"type": MITSUBA_IMAGE_INTEGRATOR[name], "max_depth": md})
    imgs = np.stack([np.array(mi.render(scene, seed=100 + s, spp=spp, integrator=image_integ))[..., :3]
                     for s in range(seeds)])
    out = {"imgs": imgs, "grads": {}}
    if grad:
        w = mi.TensorXf(weights(*imgs.shape[1:3]))
        integ = mi.load_dict({"type": "prbvolpath" if "volpath" in t else "prb", "max_depth": md})
        keys = [_split(p)[0] for p in params]
        g = {k: [] for k in keys}
        ps = mi.traverse(scene)
        missing = [k for k in keys if k not in ps]
        if missing:
            raise KeyError(f"Mitsuba has no parameter '{missing[0]}'")
        ps.keep(keys)   # (mi.render takes the tracked ones; a hair with pigments reports its sigma_a as None)
        for s in range(seeds):
            vals = {}
            for k in keys:   # assign (marks the key dirty: bitmaps/volumes rebuild from it) then track
                v = dr.detach(ps[k])
                dr.enable_grad(v)
                ps[k] = v
                vals[k] = v
            ps.update()
            img = mi.render(scene, ps, seed=300 + s, seed_grad=400 + s, spp=grad_spp, integrator=integ)
            loss = dr.sum(img * w, axis=None)
            dr.backward(loss)
            for k in keys:
                g[k].append(float(np.sum(np.array(dr.grad(vals[k])))))
                dr.disable_grad(vals[k])
        out["grads"] = {k: np.array(v) for k, v in g.items()}
    return out


def _integrator(path, defines):
    """(type, max_depth) of the scene's integrator."""
    from tirender.config import load_config
    integ = load_config(path, defines=defines)["scene"].get("integrator", {})
    return integ.get("type", "path"), int(integ.get("max_depth", 6))


# -- statistics ------------------------------------------------------------------------------------
P_FAIL = 0.0027   # two-sided p below which two means differ: the 3σ tail of a normal


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a, b, x):
    """Regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def welch_p(ma, sa, na, mb, sb, nb):
    """Two-sided p-value of Welch's t-test: means ma, mb with standard errors sa, sb estimated from
    na, nb samples. 1 where both SEs are 0 and the means agree, 0 where they are 0 and differ."""
    v = sa * sa + sb * sb
    if not v > 0.0:
        return 1.0 if ma == mb else 0.0
    t = (ma - mb) / math.sqrt(v)
    df = v * v / (sa ** 4 / max(na - 1, 1) + sb ** 4 / max(nb - 1, 1))
    return betainc(0.5 * df, 0.5, df / (df + t * t))


def grad_ok(ma, sa, mb, sb, p):
    """A gradient pair agrees: p >= P_FAIL, and the same sign where both are 3 SE clear of 0."""
    clear = abs(ma) > 3 * sa and abs(mb) > 3 * sb
    return p >= P_FAIL and (not clear or np.sign(ma) == np.sign(mb))


def compare(ti, mi_, name=""):
    a, b = ti["imgs"], mi_["imgs"]
    k = a.shape[0]
    ma, mb = a.reshape(k, -1, 3).mean(1), b.reshape(k, -1, 3).mean(1)
    sea, seb = ma.std(0, ddof=1) / np.sqrt(k), mb.std(0, ddof=1) / np.sqrt(k)
    z = (ma.mean(0) - mb.mean(0)) / np.sqrt(sea ** 2 + seb ** 2 + 1e-30)
    p = np.array([welch_p(ma[:, c].mean(), sea[c], k, mb[:, c].mean(), seb[c], mb.shape[0]) for c in range(3)])
    noise = np.sqrt(np.mean(a.var(0, ddof=1) / k + b.var(0, ddof=1) / k))
    rmse = np.sqrt(np.mean((a.mean(0) - b.mean(0)) ** 2))
    r = {"mean_ti": ma.mean(0), "mean_mi": mb.mean(0), "z": z, "p": p, "rmse": rmse, "noise": noise,
         "rmse_ratio": rmse / max(noise, 1e-30), "grads": []}
    for key, ga in ti["grads"].items():
        gb = mi_["grads"][key]
        sa, sb = ga.std(ddof=1) / np.sqrt(len(ga)), gb.std(ddof=1) / np.sqrt(len(gb))
        gz = (ga.mean() - gb.mean()) / np.sqrt(sa ** 2 + sb ** 2 + 1e-30)
        gp = welch_p(ga.mean(), sa, len(ga), gb.mean(), sb, len(gb))
        r["grads"].append((key, ga.mean(), sa, gb.mean(), sb, gz, gp, grad_ok(ga.mean(), sa, gb.mean(), sb, gp)))
    r["pass_img"] = bool(np.all(p >= P_FAIL) and r["rmse_ratio"] <= 1.2)
    r["pass_grad"] = all(g[7] for g in r["grads"] if (name, g[0]) not in BY_DESIGN)
    return r


def run_scene(name, res, spp, seeds, grad_spp, grad=True):
    path = os.path.join(SCENES_DIR, name + ".xml")
    defines = {"res": str(res), "spp": str(spp)}
    params = SCENES[name]
    t0 = time.time()
    ti = tirender_run(path, defines, spp, seeds, params, grad_spp, grad)
    if "missing" in ti:
        return {"name": name, "missing": ti["missing"]}
    mi_ = mitsuba_run(path, defines, spp, seeds, params, grad_spp, grad)
    r = compare(ti, mi_, name)
    r["name"], r["time"] = name, time.time() - t0
    return r


def fmt(v):
    return "[" + ", ".join(f"{x:.4g}" for x in np.ravel(v)) + "]"


def table(results, settings):
    lines = ["# tirender vs Mitsuba 3 parity", "", settings, "",
             "| scene | mean tirender | mean Mitsuba | z (per channel) | Welch p (per channel) | RMSE / noise | images |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if "missing" in r:
            lines.append(f"| {r['name']} | model missing: {r['missing'].replace('|', '/')} | | | | | — |")
            continue
        lines.append(f"| {r['name']} | {fmt(r['mean_ti'])} | {fmt(r['mean_mi'])} | {fmt(r['z'])} | {fmt(r['p'])} | "
                     f"{r['rmse']:.4g} / {r['noise']:.4g} = {r['rmse_ratio']:.2f} | "
                     f"{'pass' if r['pass_img'] else 'FAIL'} |")
    lines += ["", "| scene | parameter (Mitsuba key) | tirender ∂ (± SE) | Mitsuba ∂ (± SE) | z | Welch p | sign | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for key, ma, sa, mb, sb, z, p, ok in r.get("grads", []):
            why = BY_DESIGN.get((r["name"], key))
            sign = ("same" if np.sign(ma) == np.sign(mb) else "differs") + (
                "" if abs(ma) > 3 * sa and abs(mb) > 3 * sb else " (within noise of 0)")
            verdict = f"differs by design: {why}" if why else ("pass" if ok else "FAIL")
            lines.append(f"| {r['name']} | `{key}` | {ma:.5g} ± {sa:.2g} | {mb:.5g} ± {sb:.2g} | {z:+.2f} | {p:.3g} | "
                         f"{sign} | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", default="all", help="comma-separated names, 'all' or 'ci'")
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--spp", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--grad-spp", type=int, default=16)
    ap.add_argument("--no-grad", action="store_true")
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "parity.md"))
    a = ap.parse_args(argv)
    names = list(SCENES) if a.scenes == "all" else list(CI_SUBSET) if a.scenes == "ci" else a.scenes.split(",")
    import tirender
    tirender.init(a.arch)
    settings = (f"{a.res}x{a.res} px, {a.spp} spp x {a.seeds} seeds (images), {a.grad_spp} spp x {a.seeds} seeds "
                f"(PRB gradients){' (no gradients)' if a.no_grad else ''}; tirender on {a.arch}, Mitsuba "
                f"llvm_ad_rgb. Command: python3 benchmarks/parity/run.py " + " ".join(argv or sys.argv[1:]))
    results = []
    for n in names:
        r = run_scene(n, a.res, a.spp, a.seeds, a.grad_spp, not a.no_grad)
        results.append(r)
        print(table([r], "").split("\n", 4)[-1], flush=True)
    md = table(results, settings)
    print(md)
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
