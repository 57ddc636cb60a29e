"""Public rendering API: ``load_scene`` and ``render``."""
import os
import time

import numpy as np

from .backend import ensure_init
from .errors import ConfigError
from .progress import Progress
from .scene.description import load_yaml, parse_scene
from .scene.scene import Scene

DEFAULT_SPP = 64


def load_scene(path_or_dict, base_dir=None, overrides=None):
    """Scene from a YAML file (a scene file, or a config with a `scene:` section) or a dict."""
    ensure_init()
    file = None
    if isinstance(path_or_dict, (str, os.PathLike)):
        file = str(path_or_dict)
        data = load_yaml(file)
        if "scene" in data and isinstance(data["scene"], (dict, str)):
            data = data["scene"]
            if isinstance(data, str):
                sub = data if os.path.isabs(data) else os.path.join(os.path.dirname(os.path.abspath(file)), data)
                file = sub
                data = load_yaml(sub)
    elif isinstance(path_or_dict, dict):
        data = path_or_dict
        if "scene" in data and isinstance(data["scene"], dict):
            data = data["scene"]
    else:
        raise ConfigError(f"expected a file name or a dict, got {type(path_or_dict).__name__}")
    if overrides:
        from .config import apply_overrides
        data = apply_overrides(data, overrides, file)
    return Scene(parse_scene(data, file, base_dir))


def _integrator_args(scene, integrator):
    it = dict(scene.integrator)
    if integrator is not None:
        it["type"] = integrator
    t = it["type"]
    max_depth = it["max_depth"]
    if t == "direct":
        max_depth = min(max_depth, 2)
    return t, max_depth, it["rr_depth"], int(it["hide_emitters"])


def _batches(spp, npix):
    """Split spp into kernel launches of roughly 2M samples each (for the progress bar)."""
    per = max(1, min(spp, (1 << 21) // max(npix, 1)))
    out, done = [], 0
    while done < spp:
        k = min(per, spp - done)
        out.append((done, k))
        done += k
    return out


def render(scene, spp=None, seed=0, sensor=0, integrator=None, progress=True):
    """Render one sensor. Returns float32 linear RGB (H, W, 3), row 0 at the top.

    spp: samples per pixel (default 64); seed: fixes the image (per backend); integrator:
    override the scene's ("path", "direct", "aov").
    """
    from .integrators import aov, path
    if not isinstance(scene, Scene):
        scene = load_scene(scene)
    spp = DEFAULT_SPP if spp is None else int(spp)
    if spp < 1:
        raise ConfigError(f"spp must be >= 1, got {spp}", key="spp")
    if not 0 <= sensor < len(scene.sensors):
        raise ConfigError(f"sensor index {sensor} out of range (scene has {len(scene.sensors)})", key="sensor")
    t, max_depth, rr_depth, hide = _integrator_args(scene, integrator)
    if t in ("volpath", "prbvolpath", "volpath_raymarch"):  # participating media (tirender/media)
        from .integrators import volpath
        return volpath.render(scene, spp=spp, seed=seed, sensor=sensor, integrator=t, progress=progress)
    st = scene.bind()
    s = scene.sensors[sensor]
    npix = s.width * s.height
    st.film.fill(0)
    seed = int(seed) & 0xFFFFFFFF
    if t == "aov":
        aov.aov_kernel(st, scene.bsdf_mask, sensor, aov.aov_code(scene.integrator["aovs"][0]), spp, seed)
        img = st.aux.to_numpy()[:npix, :3] / max(spp, 1)
        return img.reshape(s.height, s.width, 3).astype(np.float32)
    with Progress(spp, "render", unit="spp", force=False) if progress else _NoBar() as bar:
        for off, k in _batches(spp, npix):
            path.render_kernel(st, scene.bsdf_mask, scene.em_mask, sensor, k, off, seed, max_depth, rr_depth, hide)
            bar.update(k)
    return resolve_film(st, s)


def render_progressive(scene, sensor=0, spp=1, sample_offset=0, seed=0, integrator=None, clear=False):
    """Add `spp` more samples (indices sample_offset..) to the film and return the running image.
    Used by the interactive viewer: call with clear=True after the camera moved."""
    from .integrators import path
    t, max_depth, rr_depth, hide = _integrator_args(scene, integrator)
    st = scene.bind()
    if clear:
        st.film.fill(0)
    path.render_kernel(st, scene.bsdf_mask, scene.em_mask, sensor, int(spp), int(sample_offset),
                       int(seed) & 0xFFFFFFFF, max_depth, rr_depth, hide)
    return resolve_film(st, scene.sensors[sensor])


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass

    def update(self, *a, **k):
        pass


def resolve_film(st, s):
    acc = st.film.to_numpy()[:s.width * s.height].astype(np.float64)  # fixed point: the scale cancels
    w = acc[:, 3:4]
    img = np.where(w > 0, acc[:, :3] / np.where(w > 0, w, 1), 0.0)
    return img.reshape(s.height, s.width, 3).astype(np.float32)


def timed_render(scene, **kw):
    t0 = time.perf_counter()
    img = render(scene, **kw)
    return img, time.perf_counter() - t0
