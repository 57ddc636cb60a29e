"""Mitsuba 3's "Custom Python plugin" tutorial (others/custom_plugin.ipynb, ``MyBSDF``) as a tirender plugin: a
smooth dielectric whose reflection is tinted at grazing angles — value lerp(tint, 1, clip(cos θi, 0, 1)) —
and whose transmission is the untinted η_ti² radiance compression, registered with ``tirender.register_bsdf``
and rendered as the tutorial does (a sphere in a constant environment of radiance 0.99, the camera at
(0, -5, 5), tint (0.2, 0.9, 0.2), η 1.33). Writes the render (PNG) to --out.

Unlike Mitsuba's (whose ``prb`` does not differentiate Dirac lobes), the tint here is differentiable through a
hand-written adjoint (``dirac_value_adjoint``: ∂<δ, F · value_r>/∂tint = F (1 − c) δ for the reflection lobe
of probability F, 0 for the transmission); ``--check`` compares render_grad's gradient of ``sphere.tint`` along
a direction with central finite differences on correlated random numbers (same seed for the ± renders) and
exits 1 if they disagree or if the gradient is not significant.

    python demos/custom_bsdf.py [--out out/custom_bsdf] [--res 64] [--spp 32] [--check] [--seeds 16]
"""
import argparse
import os
import sys

import numpy as np
import taichi as ti

from tirender import plugins
from tirender.plugins import (BOTH_SIDES, DELTA, SPECTRUM, TRANSMISSION, BsdfSample, Number, Texture, const,
                              fresnel_dielectric, invalid_sample, reflect, refract, slot_rgb, slot_rgb_adjoint, spec,
                              struct)

_TINT = 0   # texture slot of the tint
_ETA = 0    # float constant: the relative IOR


class TintedDielectric:
    """Mitsuba's tutorial BSDF ``MyBSDF``: a smooth dielectric whose reflection is tinted at grazing angles
    (lerp(tint, 1, cos θi)); differentiable: ``tint`` (RGB, through its reflection lobe's value)."""
    NAME = "tinted_dielectric"
    KEYS = (Texture("tint", 3, default=1.0, lo=0.0, hi=1.0, doc="reflection tint at grazing angles"),
            Number("eta", default=1.33, lo=1e-3, hi=1e3, doc="relative IOR (interior / exterior)"))
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = struct(tint=SPECTRUM, eta=float)
    N_CONST = 1

    @staticmethod
    def constants(values, file, key):
        """The row's float constants: [η]."""
        return [values["eta"]]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return TintedDielectric.Params(tint=slot_rgb(st, ctx, _TINT), eta=const(st, ctx, _ETA))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _TINT, g.tint)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        """Reflection with probability F (weight lerp(tint, 1, clip(cos θi, 0, 1))), else refraction (weight
        η_ti²), as Mitsuba's tutorial."""
        s = invalid_sample()
        cos_i = wi[2]
        if cos_i != 0.0:
            r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(cos_i, p.eta)
            if u1 <= r_i:
                c = ti.min(ti.max(cos_i, 0.0), 1.0)
                s = BsdfSample(wo=reflect(wi), weight=p.tint * (1.0 - c) + c, pdf=r_i, eta=1.0, delta=1, valid=1)
            else:
                s = BsdfSample(wo=refract(wi, cos_t, eta_ti), weight=spec(eta_ti * eta_ti), pdf=1.0 - r_i,
                               eta=eta_it, delta=1, valid=1)
            if s.pdf <= 0.0:
                s.valid = 0
        return s

    @staticmethod
    @ti.func
    def dirac_value_adjoint(p, wi, wo, d_out):
        """∂<d_out, P w>/∂p of the lobe wi -> wo: reflection (wo on wi's side) P w = F lerp(tint, 1, c), so
        ∂/∂tint = F (1 − c) d_out; the transmission's value does not depend on the tint; η is not differentiated."""
        g = TintedDielectric.Params(tint=spec(0.0), eta=0.0)
        if wi[2] * wo[2] > 0.0:
            r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(wi[2], p.eta)
            c = ti.min(ti.max(wi[2], 0.0), 1.0)
            g.tint = d_out * (r_i * (1.0 - c))
        return g


def scene_dict(res, tint=(0.2, 0.9, 0.2), eta=1.33):
    """The tutorial's scene: a unit sphere of the tinted dielectric in a constant environment (0.99), seen from
    (0, -5, 5) (Mitsuba's default 39.3° fov along x); path tracing without Russian roulette (the FD check's
    renders then share their paths)."""
    return {
        "integrator": {"type": "path", "max_depth": 8, "rr_depth": 100},
        "sensors": [{"type": "perspective", "fov": 39.3077, "fov_axis": "x",
                     "to_world": {"look_at": {"origin": [0, -5, 5], "target": [0, 0, 0], "up": [0, 0, 1]}},
                     "film": {"width": res, "height": res, "filter": {"type": "box"}}}],
        "emitters": [{"type": "constant", "radiance": 0.99}],
        "bsdfs": {"glass": {"type": "tinted_dielectric", "tint": list(tint), "eta": eta}},
        "shapes": [{"id": "sphere", "type": "sphere", "bsdf": "glass"}],
    }


def check(scene, spp, seeds, h=0.05, direction=(1.0, -1.0, 1.0)):
    """(PRB projections per seed, FD projections per seed) of <∇ <w, y>, u> for the BSDF ``glass``'s parameter
    ``glass.tint`` (w: fixed random pixel weights; FD: the ± renders share their seed)."""
    import tirender
    s = scene.sensors[0]
    w = np.random.default_rng(7).uniform(0.2, 1.0, (s.height, s.width, 3)).astype(np.float32) / (s.width * s.height)
    u = np.asarray(direction, np.float32)
    g = [float((tirender.render_grad(scene, w, spp=spp, seed=1000 + k, progress=False)["glass.tint"]
                .astype(np.float64) * u).sum()) for k in range(seeds)]
    v0 = scene.params["glass.tint"].copy()
    f = []
    for k in range(seeds):
        vals = []
        for sign in (1.0, -1.0):
            scene.params["glass.tint"] = v0 + sign * h * u
            vals.append((tirender.render(scene, spp=spp, seed=k, progress=False).astype(np.float64) * w).sum())
        f.append((vals[0] - vals[1]) / (2 * h))
    scene.params["glass.tint"] = v0
    return np.array(g), np.array(f)


def agree(g, f, sigmas=3.0, min_signal=3.0):
    """(ok, message): the means agree within `sigmas` combined standard errors and the FD gradient is
    `min_signal` standard errors away from 0 (tests/gradcheck_util.py assert_agree)."""
    se_g, se_f = g.std(ddof=1) / np.sqrt(len(g)), f.std(ddof=1) / np.sqrt(len(f))
    se = np.hypot(se_g, se_f)
    msg = f"PRB {g.mean():.6g} ± {se_g:.2g} vs FD {f.mean():.6g} ± {se_f:.2g}"
    if abs(g.mean() - f.mean()) > sigmas * se + 1e-7 * abs(f.mean()):
        return False, "disagree: " + msg
    if abs(f.mean()) <= min_signal * se_f:
        return False, "gradient not significant: " + msg
    return True, "agree: " + msg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("out", "custom_bsdf"))
    ap.add_argument("--res", type=int, default=64, help="film width and height of the render")
    ap.add_argument("--spp", type=int, default=32)
    ap.add_argument("--check", action="store_true", help="verify the tint gradient against finite differences")
    ap.add_argument("--check-res", type=int, default=12)
    ap.add_argument("--check-spp", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=16, help="seeds of the check (PRB and FD each)")
    a = ap.parse_args(argv)
    import tirender
    from tirender.io.images import save_png

    plugins.register_bsdf(TintedDielectric)
    scene = tirender.load_scene(scene_dict(a.res))
    img = tirender.render(scene, spp=a.spp, seed=0, progress=False)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "tinted_dielectric.png")
    save_png(path, img)
    print(f"-> {path} ({a.res}x{a.res}, {a.spp} spp, mean {img.mean(axis=(0, 1)).round(4).tolist()})")
    if not a.check:
        return 0
    small = tirender.load_scene(scene_dict(a.check_res))
    g, f = check(small, a.check_spp, a.seeds)
    ok, msg = agree(g, f)
    print(f"glass.tint gradient ({a.seeds} seeds, {a.check_res}x{a.check_res}, {a.check_spp} spp): {msg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
