"""``tirender gradcheck``: PRB (or any gradient method) against central finite differences.

For each parameter π and a fixed random direction u (unit RMS over its entries) and a fixed
random weight image w (uniform in [0, 1]), the projected gradient of the objective <w, y(π)> is
estimated
  * by the gradient method: <∇π <w, y>, u> for K adjoint seeds, and
  * by central differences with correlated random numbers: (<w, y(π + h u)> - <w, y(π - h u)>) / 2h,
    the same primal seed for both renders, for K seeds,
and the two means are compared with their combined standard error: z = (g - f) / SE. A parameter
passes when |z| <= z_max (default 3.5) or the difference is below 2 % of the gradient's scale
(finite differences of a step h carry an O(h²) bias). Steps keep π ± h u inside the bounds.
"""
import sys
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError


@dataclass
class CheckRow:
    name: str
    grad: float
    fd: float
    se: float
    z: float
    ok: bool


def _direction(scene, name, rng, h_rel):
    """(u, h): a random direction over the parameter's entries and a step keeping π ± h u in bounds."""
    info = scene.params.info(name)
    v = scene.params[name].astype(np.float64)
    u = rng.uniform(-1.0, 1.0, v.shape)
    u /= max(float(np.sqrt((u * u).mean())), 1e-12)
    scale = max(float(np.sqrt((v * v).mean())), 0.05)
    h = h_rel * scale
    lo, hi = info.lo, info.hi
    room = np.minimum(v - lo, hi - v)          # distance to the nearer bound, per entry
    u = np.where(room <= 1e-6 * scale, 0.0, u)  # entries sitting on a bound stay fixed
    with np.errstate(divide="ignore", invalid="ignore"):
        lim = np.where(np.abs(u) > 0, room / np.abs(u), np.inf)
    h = min(h, 0.5 * float(lim.min())) if np.isfinite(lim.min()) else h
    return u.astype(np.float32), max(h, 1e-6 * scale)


def check(scene, names=None, spp=16, seeds=8, h_rel=0.01, sensor=0, method="prb", z_max=3.5, seed=0,
          progress=None):
    """Run the comparison for `names` (default: every parameter). Returns a list of CheckRow."""
    from .api import render, render_grad
    names = list(names or scene.params.keys())
    for n in names:
        scene.params.info(n)                       # unknown names: one clear error before any work
    s = scene.sensors[sensor]
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.0, 1.0, (s.height, s.width, 3)).astype(np.float32)   # positive: little cancellation
    rows = []
    for n in names:
        u, h = _direction(scene, n, rng, h_rel)
        v0 = scene.params[n]
        g, f = [], []
        for k in range(seeds):
            gr = render_grad(scene, w, spp=spp, seed=1000 + k, sensor=sensor, method=method, progress=False)
            g.append(float((gr[n].astype(np.float64) * u).sum()))
            scene.params[n] = v0 + h * u
            a = float((render(scene, spp=spp, seed=k, sensor=sensor, progress=False).astype(np.float64) * w).sum())
            scene.params[n] = v0 - h * u
            b = float((render(scene, spp=spp, seed=k, sensor=sensor, progress=False).astype(np.float64) * w).sum())
            scene.params[n] = v0
            f.append((a - b) / (2.0 * h))
            if progress:
                progress(n, k)
        g, f = np.array(g), np.array(f)
        se = float(np.sqrt(g.var(ddof=1) / len(g) + f.var(ddof=1) / len(f))) if seeds > 1 else float("nan")
        diff = float(g.mean() - f.mean())
        z = diff / se if se > 0 else (0.0 if diff == 0 else float("inf"))
        scale = max(abs(g.mean()), abs(f.mean()))
        ok = bool(abs(z) <= z_max or abs(diff) <= 0.02 * scale)
        rows.append(CheckRow(n, float(g.mean()), float(f.mean()), se, z, ok))
    return rows


def format_table(rows):
    head = f"{'parameter':32s} {'PRB':>12s} {'FD':>12s} {'std.err':>10s} {'z':>7s}  result"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.name:32s} {r.grad:12.5g} {r.fd:12.5g} {r.se:10.3g} {r.z:7.2f}  {'pass' if r.ok else 'FAIL'}")
    return "\n".join(lines)


def gradcheck_main(cfg, args, scene):
    """The CLI command: print the table; exit code 0 when every parameter passes, 1 otherwise."""
    if args.spp < 1:
        raise ConfigError(f"must be >= 1, got {args.spp}", key="--spp")
    if args.seeds < 2:
        raise ConfigError(f"must be >= 2 (the standard error needs two estimates), got {args.seeds}", key="--seeds")
    if not 0 < args.h < 1:
        raise ConfigError(f"must lie in (0, 1), got {args.h}", key="--h")

    def tick(name, k):
        print(f"\r{name}: seed {k + 1}/{args.seeds}   ", end="", file=sys.stderr, flush=True)
    rows = check(scene, args.param, spp=args.spp, seeds=args.seeds, h_rel=args.h, sensor=args.sensor or 0,
                 method=args.method, progress=tick if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        print("\r" + " " * 60 + "\r", end="", file=sys.stderr)
    print(format_table(rows))
    bad = [r.name for r in rows if not r.ok]
    print(f"{len(rows) - len(bad)}/{len(rows)} parameters pass ({args.method}, {args.spp} spp, {args.seeds} seeds)")
    return 1 if bad else 0
