"""Command-line entry points for radiance fields (wired into ``tirender optimize`` / ``tirender render``).

Also runnable on its own: ``python -m tirender.radiance_field.cli optimize CONFIG [--out DIR]``
and ``python -m tirender.radiance_field.cli render FIELD.npz [--out DIR]``.
"""
import argparse
import os
import sys

import numpy as np

from .. import backend
from ..errors import TirenderError


def optimize_main(cfg, cfg_path, out_dir, iters=None, resume=False):
    """Train the ``radiance_field:`` section of a config; writes ``out_dir/{field.npz, metrics.json,
    checkpoint.npz, heldout_*.png}``; iters overrides the total iteration count (spread over the
    stages in proportion). Returns the metrics dict."""
    from .train import train
    backend.ensure_init()
    if isinstance(cfg, dict) and isinstance(cfg.get("radiance_field"), dict):
        # a path_traced dataset without its own scene renders the config's top-level scene
        ds = cfg["radiance_field"].get("dataset")
        if isinstance(ds, dict) and ds.get("type") == "path_traced" and ds.get("scene") is None \
                and isinstance(cfg.get("scene"), dict) and cfg["scene"]:
            cfg = dict(cfg, radiance_field=dict(cfg["radiance_field"], dataset=dict(ds, scene=cfg["scene"])))
    return train(cfg, cfg_path=cfg_path, out_dir=out_dir, iters=iters, resume=resume)


def render_main(npz_path, out_dir, frames=36, width=None, height=None, spp=1):
    """Render a saved field along a circular orbit → ``out_dir/frame_NNNN.png``; returns the paths.
    The orbit (centre, radius, up, elevation) and field of view come from the training cameras
    stored in the .npz; width/height default to the training image size."""
    from .dataset import orbit_cameras, render_field_views
    from .field import RadianceField
    from .train import save_png
    backend.ensure_init()
    fld, meta = RadianceField.load(npz_path)
    center = meta.get("orbit_center", (fld.bbox_min + fld.bbox_max) / 2)
    radius = float(meta.get("orbit_radius", 2.0 * np.linalg.norm(fld.bbox_max - fld.bbox_min)))
    up = meta.get("orbit_up", np.array([0.0, 1.0, 0.0]))
    elev = float(meta.get("orbit_elevation", 25.0))
    fov = float(meta.get("fov_x", 45.0))
    width = int(width or meta.get("width", 256))
    height = int(height or meta.get("height", width))
    linear = bool(meta.get("linear", False))
    frames = max(int(frames or 36), 1)
    os.makedirs(out_dir, exist_ok=True)
    c2w = orbit_cameras(frames, radius, center, up, elevation=elev)
    paths = []
    for i in range(frames):
        img = render_field_views(fld, c2w[i:i + 1], fov, width, height, spp=max(int(spp or 1), 1), seed=i)[0]
        p = os.path.join(out_dir, f"frame_{i:04d}.png")
        save_png(p, img, linear)
        paths.append(p)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tirender.radiance_field.cli")
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("optimize")
    o.add_argument("config")
    o.add_argument("--out", default=None)
    o.add_argument("--iters", type=int, default=None)
    o.add_argument("--resume", action="store_true")
    o.add_argument("--arch", default=None)
    r = sub.add_parser("render")
    r.add_argument("field")
    r.add_argument("--out", default="out/radiance_field_orbit")
    r.add_argument("--frames", type=int, default=36)
    r.add_argument("--width", type=int, default=None)
    r.add_argument("--height", type=int, default=None)
    r.add_argument("--spp", type=int, default=1)
    r.add_argument("--arch", default=None)
    a = ap.parse_args(argv)
    try:
        backend.init(a.arch or os.environ.get("TIRENDER_ARCH", "auto"))
        if a.cmd == "optimize":
            import yaml
            from ..errors import ConfigError
            try:
                with open(a.config) as fh:
                    cfg = yaml.safe_load(fh)
            except FileNotFoundError:
                raise ConfigError("file not found", file=a.config)
            except yaml.YAMLError as e:
                raise ConfigError(f"invalid YAML ({str(e).splitlines()[0]})", file=a.config)
            out = a.out or os.path.join("out", os.path.splitext(os.path.basename(a.config))[0])
            m = optimize_main(cfg, a.config, out, a.iters, a.resume)
            print(f"held-out PSNR {m['heldout_psnr']:.2f} dB; wrote {out}/field.npz and metrics.json")
        else:
            paths = render_main(a.field, a.out, a.frames, a.width, a.height, a.spp)
            print(f"wrote {len(paths)} frames to {a.out}")
    except TirenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
