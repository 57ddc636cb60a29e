"""Posed-image datasets for radiance-field training, and camera rays.

Camera convention (Mitsuba 3 / tirender): a camera-to-world matrix has columns
(left, up, forward, origin). A film sample (sx, sy) ∈ [0,1]² (sx to the image right, sy down,
row 0 at the top) maps to the camera-space direction (tx·(1−2sx), ty·(1−2sy), 1) with
tx = tan(fov_x/2), ty = tx·H/W. Images are float32 (H, W, 3), row 0 at the top.

Sources: ``procedural`` (a ground-truth field of coloured blobs and a torus with view-dependent
colour, rendered by this package's own forward kernel at a fine step), ``nerf`` (a folder with
``transforms.json`` — or ``transforms_train.json`` + ``transforms_test.json`` — in the
NeRF-synthetic convention) and ``path_traced`` (a tirender scene rendered by the path tracer).
"""
import json
import os
from dataclasses import dataclass, field as dc_field

import numpy as np

from ..errors import ConfigError
from ..scene.transforms import look_at
from .field import SH_C0, SH_C1, RadianceField, channels


@dataclass
class Dataset:
    """images: (V, H, W, 3) float32; c2w: (V, 4, 4) camera-to-world (tirender convention);
    fov_x: (V,) degrees; train / heldout: view indices; linear: True if radiance is linear
    (PNG writes apply the sRGB curve), False if the values are display (sRGB) values."""
    images: np.ndarray
    c2w: np.ndarray
    fov_x: np.ndarray
    train: np.ndarray
    heldout: np.ndarray
    linear: bool = False
    background: np.ndarray = dc_field(default_factory=lambda: np.zeros(3))
    name: str = ""

    @property
    def height(self):
        return self.images.shape[1]

    @property
    def width(self):
        return self.images.shape[2]

    def rays(self, views, rows, cols, jx=0.5, jy=0.5):
        """World rays (o, d) (n, 3) through pixels (views, rows, cols) at sub-pixel offsets (jx, jy)."""
        return pixel_rays(self.c2w[views], self.fov_x[views], self.width, self.height, rows, cols, jx, jy)

    def view_rays(self, v, jx=0.5, jy=0.5):
        """All H·W rays of view v, row-major."""
        rows, cols = np.divmod(np.arange(self.height * self.width), self.width)
        return self.rays(np.full(rows.size, v), rows, cols, jx, jy)


# ----------------------------------------------------------------------------- cameras and rays

def pixel_rays(c2w, fov_x, width, height, rows, cols, jx=0.5, jy=0.5):
    """Rays through pixels. c2w: (4, 4) or (n, 4, 4); fov_x: degrees, scalar or (n,);
    rows, cols: (n,) ints; jx, jy: sub-pixel offsets in [0,1) (scalars or (n,)).
    Returns o (n, 3), unit d (n, 3), float64."""
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    n = rows.size
    c2w = np.asarray(c2w, np.float64)
    if c2w.ndim == 2:
        c2w = np.broadcast_to(c2w, (n, 4, 4))
    tx = np.tan(np.radians(np.asarray(fov_x, np.float64)) / 2) * np.ones(n)
    ty = tx * height / width
    sx = (cols + jx) / width
    sy = (rows + jy) / height
    dc = np.stack([tx * (1 - 2 * sx), ty * (1 - 2 * sy), np.ones(n)], -1)
    d = np.einsum("nij,nj->ni", c2w[:, :3, :3], dc)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    o = np.ascontiguousarray(c2w[:, :3, 3])
    return o, d


def _azimuth_frame(up):
    """Unit vectors (e1, e2) ⟂ up: azimuth 0 along e1 (+z for up = +y, the side Mitsuba's default
    cameras look from), 90° along e2 (+x)."""
    a = np.array([1.0, 0, 0]) if abs(up[0]) < 0.9 else np.array([0, 0, 1.0])
    e1 = np.cross(a, up)
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(up, e1)


def sphere_cameras(n, radius, center=(0, 0, 0), up=(0, 1, 0), elevation=(-30.0, 75.0), azimuth=360.0):
    """n camera-to-world matrices looking at ``center`` from distance ``radius``: a spiral whose
    elevation (degrees about ``up``) grows from elevation[0] to elevation[1] while the azimuth
    steps by the golden angle (azimuth=360) or, for azimuth < 360, spreads over an arc of that
    many degrees (a low-discrepancy sequence)."""
    center = np.asarray(center, np.float64)
    up = np.asarray(up, np.float64)
    up = up / np.linalg.norm(up)
    e1, e2 = _azimuth_frame(up)
    phi = (np.sqrt(5) - 1) / 2
    mats = []
    for i in range(n):
        h = (i + 0.5) / n
        elev = np.radians(elevation[0] + (elevation[1] - elevation[0]) * h)
        frac = (i * phi) % 1.0
        az = np.radians(360.0 * frac if azimuth >= 360 else azimuth * (frac - 0.5))
        dirv = np.cos(elev) * (np.cos(az) * e1 + np.sin(az) * e2) + np.sin(elev) * up
        mats.append(look_at(center + radius * dirv, center, up))
    return np.stack(mats)


def orbit_cameras(n, radius, center=(0, 0, 0), up=(0, 1, 0), elevation=25.0):
    """n camera-to-world matrices on a circular orbit (constant elevation in degrees)."""
    center = np.asarray(center, np.float64)
    up = np.asarray(up, np.float64)
    up = up / np.linalg.norm(up)
    e1, e2 = _azimuth_frame(up)
    el = np.radians(elevation)
    mats = []
    for i in range(n):
        az = 2 * np.pi * i / max(n, 1)
        dirv = np.cos(el) * (np.cos(az) * e1 + np.sin(az) * e2) + np.sin(el) * up
        mats.append(look_at(center + radius * dirv, center, up))
    return np.stack(mats)


def split_views(n_train, n_heldout):
    """Interleave held-out views among n_train + n_heldout cameras: returns (train idx, heldout idx)."""
    total = n_train + n_heldout
    held = np.unique(np.round((np.arange(n_heldout) + 0.5) * total / max(n_heldout, 1) - 0.5).astype(int)) \
        if n_heldout else np.zeros(0, int)
    train = np.setdiff1d(np.arange(total), held)
    return train, held


def render_field_views(fld, c2w, fov_x, width, height, spp=1, seed=0, progress=None):
    """Render views of a field: (V, H, W, 3) float32; spp jittered samples per pixel (sub-pixel
    offset and march jitter), averaged. spp=1 samples pixel centres with random march jitter."""
    from .render import render_rays
    c2w = np.asarray(c2w)
    fov_x = np.broadcast_to(np.asarray(fov_x, np.float64), (c2w.shape[0],))
    out = np.zeros((c2w.shape[0], height, width, 3), np.float32)
    rows, cols = np.divmod(np.arange(height * width), width)
    for v in range(c2w.shape[0]):
        rng = np.random.default_rng([int(seed), v])
        acc = np.zeros((height * width, 3))
        for s in range(spp):
            if spp == 1:
                jx = jy = 0.5
            else:
                jx, jy = rng.random(rows.size), rng.random(rows.size)
            o, d = pixel_rays(c2w[v], fov_x[v], width, height, rows, cols, jx, jy)
            L, _ = render_rays(fld, o, d, rng.random(rows.size))
            acc += L
        out[v] = (acc / spp).reshape(height, width, 3)
        if progress:
            progress(v + 1)
    return out


# ----------------------------------------------------------------------------- procedural scene

SPHERES = (  # centre, radius, peak σ, base colour, view-dependent tint (colour += rgb·(a·d))
    ((-0.42, -0.20, 0.15), 0.26, 40.0, (0.90, 0.25, 0.20), (0.20, 0.00, 0.10)),
    ((0.40, 0.05, -0.20), 0.24, 40.0, (0.20, 0.75, 0.30), (0.00, 0.20, 0.00)),
    ((0.02, 0.45, 0.28), 0.22, 40.0, (0.25, 0.35, 0.90), (-0.10, 0.00, 0.20)),
    ((0.05, -0.45, -0.35), 0.20, 40.0, (0.95, 0.85, 0.30), (0.00, -0.15, 0.10)),
)
TORUS = ((0.0, 0.0, 0.0), 0.62, 0.09, 40.0, (0.85, 0.55, 0.95), (0.15, 0.15, -0.15))  # centre, R, r, σ, colour, tint
EDGE = 0.035  # soft edge width (world units) of the sigmoid density profiles


def procedural_params(res, sh_degree=1, bbox_min=(-1, -1, -1), bbox_max=(1, 1, 1)):
    """Ground-truth parameters (res, res, res, C) [z, y, x, ch]: four soft-edged spheres and a torus
    (density σ·sigmoid((radius − distance)/EDGE)); colour = base + base·(a·d) as degree-1 SH."""
    C = channels(sh_degree)
    lo, hi = np.asarray(bbox_min, float), np.asarray(bbox_max, float)
    t = (np.arange(res) + 0.5) / res
    z, y, x = np.meshgrid(*[lo[k] + (hi[k] - lo[k]) * t for k in (2, 1, 0)], indexing="ij")
    p = np.stack([x, y, z], -1)
    sig = np.zeros(p.shape[:3])
    col = np.zeros(p.shape[:3] + (3,))
    vd = np.zeros(p.shape[:3] + (3, 3))   # (rgb, xyz) coefficients of d
    items = []
    for c, r, a, rgb, v in SPHERES:
        dist = np.sqrt(np.sum((p - c) ** 2, -1))
        items.append((a / (1 + np.exp(np.clip((dist - r) / EDGE, -50, 50))), rgb, v))
    c, R, r, a, rgb, v = TORUS
    q = p - c
    ring = np.sqrt(q[..., 0] ** 2 + q[..., 2] ** 2) - R
    dist = np.sqrt(ring ** 2 + q[..., 1] ** 2)
    items.append((a / (1 + np.exp(np.clip((dist - r) / EDGE, -50, 50))), rgb, v))
    for s, rgb, v in items:
        sig += s
        col += s[..., None] * np.asarray(rgb)
        vd += s[..., None, None] * (np.asarray(rgb)[:, None] * np.asarray(v)[None, :])
    wsum = np.maximum(sig, 1e-6)[..., None]
    col /= wsum
    vd /= wsum[..., None]
    out = np.zeros(p.shape[:3] + (C,))
    out[..., 0] = sig
    out[..., 1:4] = col / SH_C0
    if sh_degree >= 1:
        # c = SH_C0·k0 − SH_C1·y·k1 + SH_C1·z·k2 − SH_C1·x·k3
        out[..., 4:7] = -vd[..., :, 1] / SH_C1
        out[..., 7:10] = vd[..., :, 2] / SH_C1
        out[..., 10:13] = -vd[..., :, 0] / SH_C1
    return out


def procedural_dataset(views=8, heldout=2, width=128, height=128, fov=45.0, radius=3.2, gt_res=64,
                       gt_step=0.5, bbox_min=(-1, -1, -1), bbox_max=(1, 1, 1), background=(0, 0, 0),
                       elevation=(-30.0, 75.0), azimuth=360.0, spp=1, seed=0, progress=None):
    """Render the procedural ground truth from views + heldout cameras on a sphere."""
    lo, hi = np.asarray(bbox_min, float), np.asarray(bbox_max, float)
    gt = RadianceField(gt_res, sh_degree=1, bbox_min=lo, bbox_max=hi, density_activation="relu",
                       color_activation="relu", step=gt_step, background=background, t_min=1e-5,
                       params=procedural_params(gt_res, 1, lo, hi))
    c2w = sphere_cameras(views + heldout, radius, center=(lo + hi) / 2, elevation=elevation, azimuth=azimuth)
    imgs = render_field_views(gt, c2w, fov, width, height, spp=spp, seed=10_000 + seed, progress=progress)
    train, held = split_views(views, heldout)
    return Dataset(imgs, c2w, np.full(len(c2w), float(fov)), train, held, linear=False,
                   background=np.asarray(background, float), name="procedural")


# ----------------------------------------------------------------------------- NeRF-synthetic folders

def _read_image(path):
    """float32 (H, W, C) as stored (no sRGB decoding; 8/16-bit scaled to [0, 1])."""
    from ..io.images import load_image
    a = load_image(path, srgb=False)
    if a.ndim == 2:
        a = a[..., None]
    if a.shape[2] == 1:
        a = np.repeat(a, 3, -1)
    elif a.shape[2] == 2:   # grey + alpha
        a = np.concatenate([np.repeat(a[..., :1], 3, -1), a[..., 1:]], -1)
    return a


def _frames(path, tf_file):
    """Parse one transforms file → (fov_x degrees, [(image path, c2w tirender)])."""
    try:
        with open(tf_file) as fh:
            meta = json.load(fh)
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON ({e.msg} at line {e.lineno})", file=tf_file)
    if not isinstance(meta, dict):
        raise ConfigError("expected a JSON object with camera_angle_x and frames", file=tf_file)
    for k in ("camera_angle_x", "frames"):
        if k not in meta:
            raise ConfigError(f"missing key '{k}'", file=tf_file, key=k)
    try:
        fov_x = float(np.degrees(float(meta["camera_angle_x"])))
    except (TypeError, ValueError):
        raise ConfigError(f"expected a number (radians), got {meta['camera_angle_x']!r}", file=tf_file,
                          key="camera_angle_x")
    if not 0 < fov_x < 180:
        raise ConfigError(f"field of view must be in (0, π) radians, got {meta['camera_angle_x']}",
                          file=tf_file, key="camera_angle_x")
    frames = meta["frames"]
    if not isinstance(frames, list) or not frames:
        raise ConfigError("expected a non-empty list of frames", file=tf_file, key="frames")
    out = []
    flip = np.diag([-1.0, 1.0, -1.0, 1.0])  # NeRF (x right, y up, looks along −z) → (left, up, forward)
    for i, fr in enumerate(frames):
        for k in ("file_path", "transform_matrix"):
            if not isinstance(fr, dict) or k not in fr:
                raise ConfigError(f"missing key '{k}'", file=tf_file, key=f"frames[{i}].{k}")
        try:
            m = np.asarray(fr["transform_matrix"], np.float64)
        except (TypeError, ValueError):
            m = None
        if m is None or m.shape != (4, 4) or not np.all(np.isfinite(m)):
            raise ConfigError("transform_matrix must be 4x4 finite numbers", file=tf_file,
                              key=f"frames[{i}].transform_matrix")
        fp = str(fr["file_path"])
        img = os.path.normpath(os.path.join(path, fp))
        if not os.path.splitext(img)[1]:
            img += ".png"
        if not os.path.isfile(img):
            raise ConfigError(f"image '{fp}' not found ({img})", file=tf_file, key=f"frames[{i}].file_path")
        out.append((img, m @ flip, fr))
    return fov_x, out


def load_nerf(path, heldout=2, background=(1.0, 1.0, 1.0), downscale=1, max_views=None):
    """Load a NeRF-synthetic folder. If ``transforms_train.json`` exists it is the training split and
    ``transforms_test.json`` (or ``transforms_val.json``) the held-out split; otherwise
    ``transforms.json`` is split with ``heldout`` interleaved held-out views. RGBA images are
    composited over ``background``. Values stay as stored (sRGB display values, linear=False)."""
    if not os.path.isdir(path):
        raise ConfigError("dataset folder not found", file=path, key="dataset.path")
    tr = os.path.join(path, "transforms_train.json")
    if os.path.isfile(tr):
        fov_tr, fr_tr = _frames(path, tr)
        if max_views:
            fr_tr = fr_tr[:int(max_views)]
        fr_te, fov_te = [], fov_tr
        for name in ("transforms_test.json", "transforms_val.json"):
            te = os.path.join(path, name)
            if os.path.isfile(te):
                fov_te, fr_te = _frames(path, te)
                fr_te = fr_te[:max(int(heldout), 1)]
                break
        entries = [(f, fov_tr) for f in fr_tr] + [(f, fov_te) for f in fr_te]
        train = np.arange(len(fr_tr))
        held = np.arange(len(fr_tr), len(entries))
        files = [tr] * len(fr_tr) + [te] * len(fr_te)
    else:
        tf = os.path.join(path, "transforms.json")
        if not os.path.isfile(tf):
            raise ConfigError("no transforms.json (or transforms_train.json) in the dataset folder",
                              file=path, key="dataset.path")
        fov, fr = _frames(path, tf)
        if max_views:
            fr = fr[:int(max_views) + int(heldout)]
        if len(fr) <= heldout:
            raise ConfigError(f"{len(fr)} frames cannot leave {heldout} held-out views and some for training",
                              file=tf, key="frames")
        entries = [(f, fov) for f in fr]
        train, held = split_views(len(fr) - int(heldout), int(heldout))
        files = [tf] * len(fr)
    bg = np.asarray(background, np.float32).reshape(3)
    imgs, shape0 = [], None
    for n, ((img_path, _, _), _) in enumerate(entries):
        try:
            a = _read_image(img_path)
        except ConfigError as e:
            raise ConfigError(f"image '{img_path}': {e.problem}", file=files[n])
        if a.ndim != 3 or a.shape[2] not in (3, 4):
            raise ConfigError(f"image '{img_path}' has shape {a.shape}; expected RGB or RGBA", file=files[n])
        if shape0 is None:
            shape0 = (a.shape[:2], img_path)
        elif a.shape[:2] != shape0[0]:
            raise ConfigError(f"images have mixed sizes: '{os.path.basename(img_path)}' is "
                              f"{a.shape[1]}x{a.shape[0]} but '{os.path.basename(shape0[1])}' is "
                              f"{shape0[0][1]}x{shape0[0][0]}; all images must have the same size", file=files[n])
        if a.shape[2] == 4:
            a = a[..., :3] * a[..., 3:] + bg * (1 - a[..., 3:])
        if downscale > 1:
            H, W = a.shape[0] // downscale * downscale, a.shape[1] // downscale * downscale
            a = a[:H, :W].reshape(H // downscale, downscale, W // downscale, downscale, 3).mean((1, 3))
        imgs.append(a.astype(np.float32))
    c2w = np.stack([e[0][1] for e in entries])
    fov = np.array([e[1] for e in entries], np.float64)
    return Dataset(np.stack(imgs), c2w, fov, np.asarray(train), np.asarray(held), linear=False,
                   background=bg.astype(np.float64), name=os.path.basename(os.path.normpath(path)))


# ----------------------------------------------------------------------------- path-traced scenes

def path_traced_dataset(scene, views=8, heldout=2, width=128, height=128, fov=45.0, radius=3.2,
                        center=(0, 0, 0), up=(0, 1, 0), elevation=(-30.0, 75.0), azimuth=360.0, spp=64,
                        seed=0, cfg_file=None, progress=None):
    """Render a tirender scene (dict or YAML path) with the path tracer from views + heldout
    cameras on a sphere around ``center`` (uses ``tirender.load_scene`` / ``tirender.render``)."""
    import copy
    import tirender
    if isinstance(scene, str):
        p = scene if os.path.isabs(scene) or cfg_file is None else os.path.join(os.path.dirname(cfg_file), scene)
        if not os.path.isfile(p):
            raise ConfigError(f"scene file '{scene}' not found", file=cfg_file, key="dataset.scene")
        import yaml
        with open(p) as fh:
            scene = yaml.safe_load(fh)
    if not isinstance(scene, dict):
        raise ConfigError("expected a scene description (mapping) or a path to one", file=cfg_file,
                          key="dataset.scene")
    if not hasattr(tirender, "load_scene") or not hasattr(tirender, "render"):
        raise ConfigError("the path tracer (tirender.load_scene / tirender.render) is not available in this "
                          "build", file=cfg_file, key="dataset.type")
    if isinstance(scene.get("scene"), dict):   # a job config (render:, scene:) rather than a bare scene
        scene = scene["scene"]
    c2w = sphere_cameras(views + heldout, radius, center=center, up=up, elevation=elevation, azimuth=azimuth)
    scene = copy.deepcopy(scene)
    scene["sensors"] = [{"type": "perspective", "fov": float(fov), "fov_axis": "x",
                         "to_world": {"look_at": {"origin": [float(v) for v in m[:3, 3]],
                                                  "target": [float(v) for v in center],
                                                  "up": [float(v) for v in up]}},
                         "film": {"width": int(width), "height": int(height)}} for m in c2w]
    sc = tirender.load_scene(scene, base_dir=os.path.dirname(os.path.abspath(cfg_file)) if cfg_file else None)
    imgs = []
    for i in range(len(c2w)):
        imgs.append(np.asarray(tirender.render(sc, spp=int(spp), seed=int(seed) + i, sensor=i), np.float32))
        if progress:
            progress(i + 1)
    train, held = split_views(views, heldout)
    return Dataset(np.stack(imgs)[..., :3], c2w, np.full(len(c2w), float(fov)), train, held, linear=True,
                   name="path_traced")
