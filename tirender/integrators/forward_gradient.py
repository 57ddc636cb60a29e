"""Gradients by forward mode (``method: forward``): for a few parameter elements, ∂<δy, image>/∂π_k =
<δy, J e_k>, one forward-mode pass (J e_k, the image's derivative along element k) per element.

Reverse mode (PRB) yields every parameter's gradient from one replay; forward mode yields one direction per
pass, so this costs as many passes as there are elements. In ``spectral_polarized`` the radiance still to come at
a vertex is a Stokes vector that a replay cannot recover (Mueller products are not invertible), and forward mode
propagates tangents instead (walk/state.py FORWARD): the gradients of a polarizer's angle, a retarder's delay —
which PRB there also returns by these passes (``element_gradients``, integrators/prb.py). Elsewhere it gives PRB's
gradient (for a seed, <w, J v> equals <PRB's gradient(w), v> up to rounding; tests/test_forward_mode.py).

    render_grad(forward, scene, adjoint_image, spp, seed, sensor, accumulate, progress, params) -> dict
        forward: the integrator's forward-mode driver (integrators/registry.py binds it); params: the
        names to differentiate (the others' gradients are 0); all passes use one seed (correlated).
"""
import numpy as np

from .. import launch
from ..errors import ConfigError
from ..progress import Progress

MAX_ELEMENTS = 64      # passes per gradient: beyond this, reverse mode (prb) is the tool


def render_grad(forward, scene, adjoint_image, spp, seed, sensor, accumulate, progress, params=None):
    names = [scene.params.resolve(n) for n in (params if params is not None else scene.params.keys())]
    for n in names:
        if n not in scene.params:
            raise ConfigError(f"unknown parameter '{n}'", key="params")
    n_el = sum(scene.params.info(n).size for n in names)
    if n_el > MAX_ELEMENTS:
        raise ConfigError(f"method 'forward' runs one pass per parameter element: {n_el} elements "
                          f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) exceed {MAX_ELEMENTS}; "
                          f"use method prb (reverse mode) where the variant has it", key="method")
    st = scene.bind()
    grads = launch.read_gradients(scene, st) if accumulate else {}
    out = element_gradients(forward, scene, adjoint_image, spp, seed, sensor, names, progress)
    total = {n: np.asarray(v, np.float64) for n, v in grads.items()}
    for n, g in out.items():
        total[n] = total.get(n, 0.0) + g
    launch.write_gradients(scene, st, total)
    res = {n: np.zeros(scene.params.info(n).shape) for n in scene.params.keys()}
    res.update(total)
    return res


def element_gradients(forward, scene, adjoint_image, spp, seed, sensor, names, progress, label="forward gradient"):
    """{name: <δy, J e_k> per element k, float64 shaped like the parameter} for the pool parameters ``names``, one
    forward-mode pass ``forward`` per element, all with the same (spp, seed, sensor); one progress bar over the
    passes (shown on a terminal when they last more than 2 s)."""
    w = np.asarray(adjoint_image, np.float64)
    out = {}
    n_el = sum(scene.params.info(n).size for n in names)
    with Progress(n_el, label, unit="pass", force=False) as bar:
        for n in names:
            info = scene.params.info(n)
            g = np.zeros(info.size, np.float64)
            for k in range(info.size):
                e = np.zeros(info.size)
                e[k] = 1.0
                jv = forward(scene, {n: e.reshape(info.shape)}, spp, seed, sensor, False)
                g[k] = float(np.sum(w * np.nan_to_num(np.asarray(jv, np.float64))))
                if progress:
                    bar.update()
            out[n] = g.reshape(info.shape)
    return out
