"""Named conductors: tirender's table (bsdfs/ior.py) holds every material Mitsuba 3 accepts, with
the RGB values Mitsuba's scalar_rgb variant derives from its spectral data (checked live when
mitsuba is importable; otherwise against the .spd file list of the Mitsuba source tree if present)."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tirender.bsdfs.ior import CONDUCTORS  # noqa: E402


def test_table_shape_and_known_value():
    for name, (eta, k) in CONDUCTORS.items():
        assert len(eta) == 3 and len(k) == 3 and min(eta) >= 0.0 and min(k) >= 0.0, name
    # Au in Mitsuba 3.9.1 scalar_rgb (not the rounded (0.143, 0.374, 1.442) of older tables)
    assert np.allclose(CONDUCTORS["Au"][0], (0.143035978, 0.375307083, 1.44204533), rtol=1e-7)
    assert len(CONDUCTORS) >= 70   # 71 in Mitsuba 3.9.1


def test_against_live_mitsuba():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    d = os.path.join(os.path.dirname(mi.__file__), "data", "ior")
    names = {f[:-len(".eta.spd")] for f in os.listdir(d) if f.endswith(".eta.spd")}
    assert names == set(CONDUCTORS)
    for n in ("Au", "Ag", "Cu", "Al", "Cr", "TiN"):
        p = mi.traverse(mi.load_dict({"type": "conductor", "material": n}))
        assert np.allclose([float(x) for x in p["eta.value"]], CONDUCTORS[n][0], rtol=1e-6), n
        assert np.allclose([float(x) for x in p["k.value"]], CONDUCTORS[n][1], rtol=1e-6), n
