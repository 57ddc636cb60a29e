"""4x4 affine transforms (numpy, float64) for `to_world` in scene files.

Conventions follow Mitsuba 3: ``look_at`` maps camera space (x to the image left,
y up, z forward) to world space.
"""
import numpy as np

from ..errors import ConfigError


def translate(v):
    m = np.eye(4)
    m[:3, 3] = v
    return m


def scale(v):
    v = np.broadcast_to(np.asarray(v, float), (3,))
    return np.diag([v[0], v[1], v[2], 1.0])


def rotate(axis, angle_deg, normalize=True):
    """Rotation by angle_deg about axis (Rodrigues' formula). normalize=False keeps the axis' length as Mitsuba's
    XML and Transform4f.rotate do (dr::rotate): a longer axis then also scales and shears."""
    a = np.asarray(axis, float)
    n = np.linalg.norm(a)
    if n == 0:
        raise ValueError("rotation axis has zero length")
    x, y, z = a / n if normalize else a
    t = np.radians(angle_deg)
    c, s = np.cos(t), np.sin(t)
    C = 1 - c
    m = np.eye(4)
    m[:3, :3] = [[x * x * C + c, x * y * C - z * s, x * z * C + y * s],
                 [y * x * C + z * s, y * y * C + c, y * z * C - x * s],
                 [z * x * C - y * s, z * y * C + x * s, z * z * C + c]]
    return m


def look_at(origin, target, up):
    """Camera-to-world: columns (left, up', forward, origin) as Mitsuba's Transform4f.look_at."""
    o, t, u = (np.asarray(v, float) for v in (origin, target, up))
    f = t - o
    if np.linalg.norm(f) == 0:
        raise ValueError("look_at origin and target coincide")
    f /= np.linalg.norm(f)
    left = np.cross(u, f)
    if np.linalg.norm(left) < 1e-12:
        raise ValueError("look_at 'up' is parallel to the viewing direction")
    left /= np.linalg.norm(left)
    new_up = np.cross(f, left)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, new_up, f, o
    return m


def _vec(val, n, where, file):
    a = np.asarray(val, float)
    if a.shape == () and n == 3:
        a = np.full(3, float(a))
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ConfigError(f"expected {n} finite numbers, got {val!r}", file, where)
    return a


def parse_transform(spec, file=None, key="to_world"):
    """Build a 4x4 matrix from a scene-file `to_world` entry.

    Accepted forms: a 4x4 nested list (matrix); a dict with one of translate / scale /
    rotate {axis, angle} / matrix / look_at {origin, target, up}; or a list of such dicts
    applied in order (the first one is applied first, as in Mitsuba's XML).
    """
    if spec is None:
        return np.eye(4)
    if isinstance(spec, list) and len(spec) == 4 and all(isinstance(r, list) and len(r) == 4 for r in spec) \
            and all(isinstance(x, (int, float)) for r in spec for x in r):
        return _check_invertible(_matrix(spec, file, key), file, key)
    items = spec if isinstance(spec, list) else [spec]
    m = np.eye(4)
    for i, item in enumerate(items):
        where = f"{key}[{i}]" if isinstance(spec, list) else key
        if not isinstance(item, dict) or not item:
            raise ConfigError(f"expected a transform (translate, scale, rotate, matrix, look_at), got {item!r}",
                              file, where)
        for op, val in item.items():
            try:
                if op == "translate":
                    t = translate(_vec(val, 3, f"{where}.translate", file))
                elif op == "scale":
                    t = scale(_vec(val, 3, f"{where}.scale", file))
                elif op == "rotate":
                    if not isinstance(val, dict) or "angle" not in val or "axis" not in val:
                        raise ConfigError("rotate needs {axis: [x, y, z], angle: degrees}", file, f"{where}.rotate")
                    t = rotate(_vec(val["axis"], 3, f"{where}.rotate.axis", file), _angle(val["angle"], file, f"{where}.rotate.angle"))
                elif op == "matrix":
                    t = _matrix(val, file, f"{where}.matrix")
                elif op == "look_at":
                    if not isinstance(val, dict) or not {"origin", "target", "up"} <= set(val):
                        raise ConfigError("look_at needs origin, target and up", file, f"{where}.look_at")
                    t = look_at(_vec(val["origin"], 3, f"{where}.look_at.origin", file),
                                _vec(val["target"], 3, f"{where}.look_at.target", file),
                                _vec(val["up"], 3, f"{where}.look_at.up", file))
                else:
                    raise ConfigError(f"unknown transform '{op}' (translate, scale, rotate, matrix, look_at)",
                                      file, where)
            except ValueError as e:
                raise ConfigError(str(e), file, f"{where}.{op}")
            m = t @ m
    return _check_invertible(m, file, key)


def _angle(v, file, key):
    """A finite number of degrees (not a boolean or a string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
        raise ConfigError(f"expected a finite number of degrees, got {v!r}", file, key)
    return float(v)


def _check_invertible(m, file, key):
    """A transform must be finite and invertible (normals and rays use its inverse)."""
    if not np.all(np.isfinite(m)):
        raise ConfigError("transform is not finite (too large values)", file, key)
    det = float(np.linalg.det(m[:3, :3]))
    scale3 = float(np.abs(m[:3, :3]).max()) ** 3
    if not abs(det) > 1e-12 * max(scale3, 1e-300) or not np.isfinite(det):
        raise ConfigError(f"transform is singular (determinant {det:g}): a zero scale or degenerate matrix "
                          f"flattens the shape", file, key)
    return m


def _matrix(val, file, key):
    a = np.asarray(val, float)
    if a.shape == (16,):
        a = a.reshape(4, 4)
    if a.shape != (4, 4) or not np.all(np.isfinite(a)):
        raise ConfigError("matrix must be 4x4 finite numbers", file, key)
    return a
