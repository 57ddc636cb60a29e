"""Forward-mode gradient images (tirender.render_forward) for the documentation: the Cornell box's
derivative w.r.t. the red wall's reflectance and w.r.t. the light's radiance, a gold sphere's
w.r.t. its roughness, and a cube's w.r.t. its translation along x (its silhouette and its shadow's
edge: edge sampling, method prb_attached), each next to the image it differentiates. Writes
docs/forward_mode.png.

    python demos/gradient_images.py [--spp 256] [--out docs/forward_mode.png]
"""
import argparse
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
CASES = (("configs/cbox.yaml", "red.reflectance", 1.0, "prb", "d/d red wall reflectance"),
         ("configs/cbox.yaml", "light.radiance", 1.0, "prb", "d/d light radiance"),
         ("configs/roughness_recovery.yaml", "metal.roughness", 1.0, "prb", "d/d gold roughness"),
         ("configs/shadow_cube.yaml", "occ.translation", [1.0, 0.0, 0.0], "prb_attached", "d/d cube translation x"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spp", type=int, default=256)
    ap.add_argument("--size", type=int, default=128, help="film width and height")
    ap.add_argument("--percentile", type=float, default=97.0,
                    help="|J v| percentile shown fully red/blue (97: the directly visible light saturates)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "forward_mode.png"))
    a = ap.parse_args()
    import imageio.v3 as iio
    import tirender
    from tirender.config import load_config
    from tirender.io.images import diverging, to_srgb
    tirender.init("cpu")
    rows = []
    for cfg_path, pname, direction, method, label in CASES:
        cfg = load_config(os.path.join(ROOT, cfg_path), [f"scene.sensors.0.film.width={a.size}",
                                                         f"scene.sensors.0.film.height={a.size}"])
        scene = tirender.scene_from_config(cfg)
        img = tirender.render(scene, spp=a.spp, seed=0, progress=False)
        jv = tirender.render_forward(scene, {pname: direction}, spp=a.spp, seed=1, method=method, progress=False)
        m = jv.mean(axis=2)
        rgb, scale = diverging(m, float(np.percentile(np.abs(m), a.percentile)))
        print(f"{cfg_path} {pname}: J v in [{jv.min():.4g}, {jv.max():.4g}], PNG scale {scale:.4g} ({label})")
        shown = np.round(np.clip(to_srgb(np.clip(img, 0.0, 1.0)), 0.0, 1.0) * 255.0).astype(np.uint8)
        rows.append(np.concatenate([shown, np.full((a.size, 4, 3), 255, np.uint8), rgb], axis=1))
    sep = np.full((4, rows[0].shape[1], 3), 255, np.uint8)
    out = np.concatenate(sum(([r, sep] for r in rows), [])[:-1], axis=0)
    iio.imwrite(a.out, out)
    print(f"-> {a.out} (rows: {', '.join(c[-1] for c in CASES)}; left the image, right J v: red +, blue -)")


if __name__ == "__main__":
    main()
