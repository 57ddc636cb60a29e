"""bumpmap against Mitsuba 3: ``eval`` and ``pdf`` of bump-mapped diffuse, anisotropic rough
conductor and rough dielectric at random uv and local directions, within 1e-3 relative — the
height gradient (bilinear derivative of the luminance), the perturbed frame, the flips and the
shadowing term together.

Reference numbers: tests/data/mitsuba_bumpmap.json, written by ``python3 tools/mitsuba_bumpmap_ref.py``
(mitsuba 3.9.1, scalar_rgb; the script documents the shading point and the texture orientation).
When mitsuba is importable, ``test_against_live_mitsuba`` recomputes them (skipped otherwise).
"""
import os
import tempfile

import numpy as np
import pytest

from mitsuba_refs import check_live, reference  # noqa: E402 (puts tools/ on sys.path)
from mitsuba_bumpmap_ref import CASES, SCALE, compute, height  # noqa: E402

REF = reference("bumpmap")
TOL = 1e-3


@pytest.fixture(scope="module")
def bench():
    from bsdf_harness import Bench
    import tirender.backend as backend
    backend.init("cpu")
    d = tempfile.mkdtemp(prefix="bump_ref_")
    f = os.path.join(d, "height.npy")
    np.save(f, height())
    specs = {cid: {"type": "bumpmap", "scale": SCALE, **flags, "bsdf": dict(nested),
                   "height": {"type": "bitmap", "data": f, "filter": "bilinear"}}
             for cid, nested, flags, _ in CASES}
    return Bench(specs, n=len(REF["cases"][0]["uv"]), tmpdir=d)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_eval_and_pdf_match_mitsuba(bench, cid):
    from bsdf_harness import fdt
    case = next(c for c in REF["cases"] if c["id"] == cid)
    bench.uv = np.ascontiguousarray(np.array(case["uv"]), dtype=fdt())
    out = bench.eval(cid, np.array(case["wi"]), np.array(case["wo"]), per_sample=True)
    ev, pdf = np.array(case["eval"]), np.array(case["pdf"])
    assert (ev > 1e-3).sum() > len(ev) // 2, "too few directions in the lobe to test anything"
    r_e = np.abs(out[:, :3] - ev) / np.maximum(np.abs(ev), 1e-5)
    r_p = np.abs(out[:, 3] - pdf) / np.maximum(np.abs(pdf), 1e-5)
    print(cid, "max rel eval", r_e.max(), "pdf", r_p.max())
    assert r_e.max() < TOL, (cid, r_e.max(), np.unravel_index(r_e.argmax(), r_e.shape))
    assert r_p.max() < TOL, (cid, r_p.max(), r_p.argmax())


def test_flat_height_is_the_nested_bsdf(bench):
    """A constant height leaves the normal alone (n' = n, S = 1): bumpmap(diffuse) = diffuse."""
    from bsdf_harness import Bench
    b = Bench({"flat": {"type": "bumpmap", "height": 0.7, "bsdf": {"type": "diffuse", "reflectance": 0.5}},
               "plain": {"type": "diffuse", "reflectance": 0.5}}, n=1)
    rng = np.random.default_rng(3)
    wo = rng.normal(size=(50, 3))
    wo[:, 2] = np.abs(wo[:, 2])
    wo /= np.linalg.norm(wo, axis=1, keepdims=True)
    wi = np.array([[0.3, 0.2, 0.9327379]])
    a, p = b.eval("flat", wi, wo)[:, :4], b.eval("plain", wi, wo)[:, :4]
    assert np.all(p[:, 0] > 0) and np.allclose(a, p, rtol=1e-5), np.abs(a - p).max()


def test_against_live_mitsuba():
    check_live(compute, REF)
