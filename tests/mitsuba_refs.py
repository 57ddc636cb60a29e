"""What the tests against stored Mitsuba 3 reference numbers share: the repository root and tools/ on sys.path
(tools/mitsuba_*_ref.py wrote the numbers and hold the cases), and the reading of tests/data/mitsuba_<name>.json."""
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
for _p in (ROOT, os.path.join(ROOT, "tools"), os.path.dirname(os.path.abspath(__file__))):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def reference(name):
    """The reference numbers tests/data/mitsuba_<name>.json (a dict)."""
    with open(os.path.join(ROOT, "tests", "data", f"mitsuba_{name}.json")) as f:
        return json.load(f)


def check_live(compute, ref, keys=("eval", "pdf")):
    """Recompute the reference numbers with the installed mitsuba (compute: the tools/ script's; skipped without
    mitsuba) and compare them with ref case by case, keys within 1e-5 relative."""
    import numpy as np
    import pytest
    pytest.importorskip("mitsuba")
    live = compute()
    for a, b in zip(live["cases"], ref["cases"]):
        for k in keys:
            assert np.allclose(a[k], b[k], rtol=1e-5, atol=1e-7), a["id"]
