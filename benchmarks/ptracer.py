"""Light tracer vs path tracer at equal time on a caustic (configs/caustic_ptracer.yaml: a glass
ball lit from the side by a small area light, the camera on the floor beside it).

Reference: the light tracer at --ref-spp (its image is checked against the path tracer's at the
same cost: per-channel means). Then, for each time budget, each integrator renders with the spp
that its measured throughput allows in that time, and the RMSE against the reference is printed
for the whole image and for the caustic (the 5 % brightest pixels of the reference in the ball's
shadow half of the frame), with the time the path tracer needs to reach the light tracer's error
(RMSE² x seconds is constant for a Monte Carlo estimator). Writes benchmarks/results/ptracer.txt-style lines to stdout and a PNG
of the equal-time images (--png).

--gradient: the gradient of the mean image w.r.t. the floor's reflectance by the light tracer's
detached PRB and by the path tracer's PRB (64², 64 spp, 8 seeds each): mean ± standard error,
seconds per estimate and variance x seconds (lower: more efficient).

    python benchmarks/ptracer.py [--ref-spp 2048] [--budgets 1 2 4 8] [--png out/ptracer_vs_path.png] [--gradient]
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "configs", "caustic_ptracer.yaml")


def gradient_efficiency(tirender, spp=64, seeds=8):
    """d<mean image>/d floor.reflectance by both integrators' PRB on the caustic at 64²."""
    sc = tirender.load_scene(CONFIG, overrides=["sensors.0.film.width=64", "sensors.0.film.height=64"])
    w = np.ones((64, 64, 3), np.float32) / (64 * 64)
    for integ in ("ptracer", "path"):
        sc.integrator["type"] = integ
        tirender.render_grad(sc, w, spp=4, seed=0, progress=False)   # compile
        vals, ts = [], []
        for s in range(seeds):
            t = time.perf_counter()
            g = tirender.render_grad(sc, w, spp=spp, seed=100 + s, progress=False)
            ts.append(time.perf_counter() - t)
            vals.append(float(g["floor.reflectance"].sum()))
        v, t = np.array(vals), float(np.median(ts))
        print(f"gradient {integ:8s} {spp} spp: {v.mean():.5f} ± {v.std(ddof=1) / np.sqrt(seeds):.5f}, "
              f"{t:.3f} s per estimate, variance x seconds {v.var(ddof=1) * t:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref-spp", type=int, default=2048)
    ap.add_argument("--budgets", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--png", default=None)
    ap.add_argument("--gradient", action="store_true")
    a = ap.parse_args()
    import tirender
    tirender.init("cpu")
    if a.gradient:
        gradient_efficiency(tirender)
    sc = tirender.load_scene(CONFIG)

    def render(integ, spp, seed):
        t = time.perf_counter()
        img = tirender.render(sc, spp=spp, seed=seed, integrator=integ, progress=False)
        return img, time.perf_counter() - t

    for integ in ("ptracer", "path"):   # compile, and measure throughput (s per spp)
        render(integ, 4, 0)
    rate = {integ: float(np.median([render(integ, 64, r)[1] for r in range(3)])) / 64 for integ in ("ptracer", "path")}
    ref, t_ref = render("ptracer", a.ref_spp, 12345)
    chk, t_chk = render("path", max(1, int(round(t_ref / rate["path"]))), 54321)
    m_ref, m_chk = ref.reshape(-1, 3).mean(0), chk.reshape(-1, 3).mean(0)
    print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; seconds per spp: ptracer {rate['ptracer']:.4f}, "
          f"path {rate['path']:.4f}")
    print(f"reference: ptracer {a.ref_spp} spp ({t_ref:.1f} s), mean RGB {np.round(m_ref, 5).tolist()}; path at the "
          f"same cost ({t_chk:.1f} s): {np.round(m_chk, 5).tolist()} (relative difference "
          f"{np.abs(m_chk / m_ref - 1).max():.2%})")
    h, w, _ = ref.shape
    lum = ref.mean(2)
    half = np.zeros_like(lum, bool)
    half[:, : w // 2 + w // 8] = True                     # the ball's shadow side of the frame
    caustic = half & (lum >= np.quantile(lum[half], 0.95))
    print(f"{'budget s':>8s} {'integrator':>10s} {'spp':>6s} {'seconds':>8s} {'RMSE':>9s} {'caustic rel. RMSE':>18s}")
    rows = {}
    for b in a.budgets:
        for k, integ in enumerate(("path", "ptracer")):
            spp = max(1, int(b / rate[integ]))
            img, t = render(integ, spp, 1000 + k)
            rmse = float(np.sqrt(((img - ref) ** 2).mean()))
            crel = float(np.sqrt(((img[caustic] - ref[caustic]) ** 2).mean()) / max(ref[caustic].mean(), 1e-9))
            rows[b, integ] = (img, rmse, crel, t)
            print(f"{b:8.1f} {integ:>10s} {spp:6d} {t:8.2f} {rmse:9.5f} {crel:18.4f}")
        (_, rp, cp, tp), (_, rl, cl, tl) = rows[b, "path"], rows[b, "ptracer"]
        # error² x time is constant for a Monte Carlo estimator: the ratio is the time the path
        # tracer needs to reach the light tracer's error
        print(f"{'':8s} time to equal RMSE, path / ptracer: {rp * rp * tp / (rl * rl * tl):.1f}x "
              f"(caustic {cp * cp * tp / (cl * cl * tl):.1f}x)")
    if a.png:
        from tirender.io.images import save_png
        b = a.budgets[len(a.budgets) // 2]
        os.makedirs(os.path.dirname(os.path.abspath(a.png)), exist_ok=True)
        save_png(a.png, np.concatenate([rows[b, "path"][0], rows[b, "ptracer"][0], ref], 1))
        print(f"wrote {a.png}: path | ptracer at a {b:g} s budget | reference")


if __name__ == "__main__":
    sys.exit(main())
