"""Finite-difference checks of render_grad with correlated random numbers (shared by tests)."""
import numpy as np

import tirender


def image_weights(sc, seed=0):
    """Random per-pixel loss weights (H, W, 3) in [0.2, 1] / (W H) for scene sc's first sensor: the δy of a
    projected-gradient check."""
    s = sc.sensors[0]
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 1.0, (s.height, s.width, 3)).astype(np.float32) / (s.width * s.height)


def projected_gradients(scene, pname, direction, weights, spp, seeds_prb, seeds_fd, h, method="prb",
                        sensor=0):
    """PRB: <∇_π <w, y>, u> for each adjoint seed; FD: (<w, y(π + h u)> - <w, y(π - h u)>) / 2h with the
    same seed for the ± renders (correlated random numbers), for each FD seed. Returns two arrays."""
    from tirender.api import render_grad
    u = np.asarray(direction, np.float32)
    g = []
    for s in seeds_prb:
        gr = render_grad(scene, weights, spp=spp, seed=s, method=method, sensor=sensor, progress=False)
        g.append(float((gr[pname].astype(np.float64) * u).sum()))
    v0 = scene.params[pname]
    f = []
    for s in seeds_fd:
        scene.params[pname] = v0 + h * u
        a = (tirender.render(scene, spp=spp, seed=s, sensor=sensor, progress=False).astype(np.float64) * weights).sum()
        scene.params[pname] = v0 - h * u
        b = (tirender.render(scene, spp=spp, seed=s, sensor=sensor, progress=False).astype(np.float64) * weights).sum()
        f.append((a - b) / (2 * h))
    scene.params[pname] = v0
    return np.array(g), np.array(f)


def assert_agree(g, f, name, sigmas=3.0, min_signal=3.0):
    """Means agree within `sigmas` combined standard errors; the gradient is clearly non-zero."""
    mg, mf = g.mean(), f.mean()
    se_g = g.std(ddof=1) / np.sqrt(len(g))
    se_f = f.std(ddof=1) / np.sqrt(len(f))
    se = np.sqrt(se_g ** 2 + se_f ** 2)
    assert abs(mg - mf) <= sigmas * se + 1e-7 * abs(mf), f"{name}: PRB {mg:.6g} ± {se_g:.2g} vs FD {mf:.6g} ± {se_f:.2g}"
    assert abs(mf) > min_signal * se_f, f"{name}: gradient not significant (FD {mf:.3g} ± {se_f:.2g})"
    return mg, mf, se


def central_differences(f, x, h=1e-6):
    """Central differences of scalar f at x (float64 array of any shape) along each coordinate."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def max_rel_err(a, b):
    """max |a - b| relative to max |b| (floored at 1e-12)."""
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def f64_child_report(test_file, flag="--f64"):
    """Run `test_file`'s ``checks()`` in a child process under fp = f64 (a process holds one
    ti.init): the file runs itself with ``flag`` (default ``--f64``) and prints a JSON report {name: {max_rel_err,
    cases}}, returned here."""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(test_file))
    root = os.path.abspath(os.path.join(here, ".."))
    env = dict(os.environ)
    env.pop("TIRENDER_FP", None)
    code = ("import sys, runpy; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); sys.argv = [%r, %r]; runpy.run_path(%r, run_name='__main__')"
            % (root, here, test_file, flag, os.path.abspath(test_file)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=root,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    return report


def assert_images_agree(a, b, sigmas=4.0, max_ratio=1.5, block=4, power=0.05, name=""):
    """Two estimators of one image, each as k independent renders a, b (k, H, W, C): per channel, the image
    means within ``sigmas`` combined standard errors (over the renders' means); the RMSE between the two mean
    images' k x k blocks within ``max_ratio`` times the combined noise of those blocks (their per-render
    variance / k: the ratio is 1 in expectation when the estimators agree); and the test has power: the
    combined standard error of each channel's mean is at most ``power`` of it. Returns the two mean images."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ka, kb = len(a), len(b)
    ma, mb = a.reshape(ka, -1, a.shape[-1]).mean(1), b.reshape(kb, -1, b.shape[-1]).mean(1)
    se = np.sqrt(ma.var(0, ddof=1) / ka + mb.var(0, ddof=1) / kb)
    diff = ma.mean(0) - mb.mean(0)
    assert np.all(np.abs(diff) <= sigmas * se), f"{name}: means {ma.mean(0)} vs {mb.mean(0)} (± {se})"
    assert np.all(se <= power * np.abs(mb.mean(0))), f"{name}: too noisy to tell ({se} for means {mb.mean(0)})"
    h, w = a.shape[1] - a.shape[1] % block, a.shape[2] - a.shape[2] % block

    def blocks(x):
        return x[:, :h, :w].reshape(len(x), h // block, block, w // block, block, -1).mean((2, 4))
    ba, bb = blocks(a), blocks(b)
    noise = np.sqrt(np.mean(ba.var(0, ddof=1) / ka + bb.var(0, ddof=1) / kb))
    rmse = np.sqrt(np.mean((ba.mean(0) - bb.mean(0)) ** 2))
    print(f"{name}: z {np.round(diff / se, 2)}, SE/mean {np.round(se / np.abs(mb.mean(0)), 4)}, "
          f"block RMSE / noise {rmse / noise:.2f}")
    assert rmse <= max_ratio * noise, f"{name}: block RMSE {rmse:.4g} = {rmse / noise:.2f} x the noise {noise:.4g}"
    return a.mean(0), b.mean(0)
