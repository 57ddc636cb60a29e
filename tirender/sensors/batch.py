"""Batch sensor (Mitsuba 3 ``batch``, src/sensors/batch.cpp): several sensors rendered side by side into one film.

The batch's film (W x H, its filter) is the image; W must be a multiple of the number N of child sensors, and
child k sees the columns [k W/N, (k+1) W/N) as its own film of W/N x H (the children's own films and samplers
are superseded by the batch's, as in Mitsuba). A camera sample at film position (x, y) is child k's at
(x - k W/N, y), k = ⌊x N / W⌋ (Mitsuba's sample_ray); everything after the ray (the film, the filter, the
adjoint image, PRB and the boundary terms) is the batch's. Like Mitsuba's, it is not for light tracing (it
has no sample_direction here; Mitsuba: "incompatible with the particle tracer"), and batches do not nest.

Scene files: YAML ``{type: batch, id, film: {...}, sensors: [child, ...]}``; Mitsuba XML ``<sensor
type="batch">`` holding ``<sensor>`` children, a film and a sampler. The children keep their parameters by
their own ids (``<child id>.to_world``, ...); they live in device rows after the scene's sensors
(``device_list``), the batch's row holding the first child's row and their number.
"""
import taichi as ti

from ..core.math import vec2
from ..errors import ConfigError

NAME = "batch"
TAG = 1 << 10              # st.cam_type of a batch row (apart from the models' tags)
KEYS = {"type", "id", "film", "sensors", "srf"}


def child_specs(spec, width, height, film, file, key):
    """The child sensor mappings of a batch mapping, each given the batch's film cut to W/N x H."""
    bad = set(spec) - KEYS
    if bad:
        raise ConfigError(f"unknown key '{sorted(bad)[0]}' (a batch sensor has: {', '.join(sorted(KEYS))})", file,
                          f"{key}.{sorted(bad)[0]}")
    if spec.get("srf") is not None:
        raise ConfigError("a sensor response function (srf) is not supported", file, f"{key}.srf")
    kids = spec.get("sensors")
    if not isinstance(kids, list) or not kids:
        raise ConfigError("a batch sensor needs a non-empty list of child sensors", file, f"{key}.sensors")
    n = len(kids)
    if width % n:
        raise ConfigError(f"the film's width ({width}) must be divisible by the number of child sensors ({n})", file,
                          f"{key}.film.width")
    out = []
    for k, c in enumerate(kids):
        ck = f"{key}.sensors[{k}]"
        if not isinstance(c, dict):
            raise ConfigError(f"expected a mapping, got {type(c).__name__}", file, ck)
        if c.get("type") == NAME:
            raise ConfigError("batch sensors do not nest", file, f"{ck}.type")
        c = dict(c)
        c["film"] = dict(film, width=width // n, height=height)
        c.setdefault("id", f"{spec.get('id', 'batch')}_{k}")
        out.append(c)
    return out


def device_list(sensors):
    """All device rows: the scene's sensors, then every batch's children (row indices = list indices), and
    per batch row (its index: (first child row, children))."""
    rows = list(sensors)
    links = {}
    for i, s in enumerate(sensors):
        if s.type == NAME:
            links[i] = (len(rows), len(s.children))
            rows.extend(s.children)
    return rows, links


@ti.func
def resolve(st: ti.template(), cam, pos):
    """(camera row, film position) that a sample at pos of camera `cam` belongs to: itself, or a batch's child
    k = ⌊x N / W⌋ at (x - k W/N, y)."""
    c = cam
    q = pos
    if st.cam_type[cam] == TAG:
        n = st.cam_child[cam][1]
        wc = st.cam_w[cam] // n
        k = ti.min(ti.max(ti.cast(ti.floor(pos[0] / wc), ti.i32), 0), n - 1)
        c = st.cam_child[cam][0] + k
        q = vec2(pos[0] - k * wc, pos[1])
    return c, q
