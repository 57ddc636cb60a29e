"""Anisotropic roughconductor / roughdielectric (α_u, α_v; GGX and Beckmann) against Mitsuba 3:
``eval`` and ``pdf`` at random local directions, within 1e-3 relative.

Reference numbers: tests/data/mitsuba_aniso.json, written by ``python3 tools/mitsuba_aniso_ref.py``
(mitsuba 3.9.1, scalar_rgb, ``mi.load_dict`` of the same dictionaries). When mitsuba is importable,
``test_against_live_mitsuba`` recomputes them (skipped otherwise).
"""

import numpy as np
import pytest

from mitsuba_refs import check_live, reference  # noqa: E402 (puts tools/ on sys.path)
from mitsuba_aniso_ref import CASES, compute  # noqa: E402

REF = reference("aniso")
TOL = 1e-3


@pytest.fixture(scope="module")
def bench():
    from bsdf_harness import Bench
    import tirender.backend as backend
    backend.init("cpu")
    return Bench({cid: dict(spec) for cid, spec, _ in CASES}, n=1)


def _rel(ours, ref, floor=1e-5):
    ours, ref = np.asarray(ours, float), np.asarray(ref, float)
    scale = np.maximum(np.abs(ref), floor)
    return np.abs(ours - ref) / scale


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_eval_and_pdf_match_mitsuba(bench, cid):
    case = next(c for c in REF["cases"] if c["id"] == cid)
    wi, wo = np.array(case["wi"]), np.array(case["wo"])
    out = bench.eval(cid, wi, wo)
    ev, pdf = np.array(case["eval"]), np.array(case["pdf"])
    assert (ev > 1e-3).sum() > len(wi) // 3, "too few directions in the lobe to test anything"
    r_e = _rel(out[:, :3], ev)
    r_p = _rel(out[:, 3], pdf)
    print(cid, "max rel eval", r_e.max(), "pdf", r_p.max())
    assert r_e.max() < TOL, (cid, r_e.max(), np.unravel_index(r_e.argmax(), r_e.shape))
    assert r_p.max() < TOL, (cid, r_p.max(), r_p.argmax())


def test_anisotropy_is_oriented_along_u(bench):
    """α_u < α_v: a lobe narrow along s (x), wide along t (y) — swapping wo's x and y changes eval."""
    wi = np.array([[0.0, 0.0, 1.0]])
    wo = np.array([[0.3, 0.0, np.sqrt(1 - 0.09)], [0.0, 0.3, np.sqrt(1 - 0.09)]])
    e = bench.eval("rc_ggx_aniso", wi, wo)[:, 0]
    assert e[1] > 5.0 * e[0], e


def test_against_live_mitsuba():
    check_live(compute, REF)


@pytest.mark.parametrize("keys,bad", [({"alpha": 0.2, "alpha_u": 0.1, "alpha_v": 0.3}, "roughness"),
                                      ({"roughness": 0.1, "alpha_u": 0.1, "alpha_v": 0.3}, "roughness"),
                                      ({"alpha_u": 0.1}, "alpha_v"), ({"alpha_v": 0.1}, "alpha_u")])
@pytest.mark.parametrize("model", ["roughconductor", "roughdielectric"])
def test_roughness_keys_as_mitsuba(model, keys, bad):
    """alpha_u and alpha_v together, and then no alpha (Mitsuba's microfacet rule): one-line ConfigError."""
    from tirender.errors import ConfigError
    from tirender.scene.description import parse_scene
    spec = {"bsdfs": {"m": {"type": model, **keys}}, "shapes": [{"type": "rectangle", "bsdf": "m"}]}
    with pytest.raises(ConfigError) as e:
        parse_scene(spec, file="s.yaml")
    assert f"bsdfs.m.{bad}" in str(e.value) and "\n" not in str(e.value), str(e.value)
    ok = {"bsdfs": {"m": {"type": model, "alpha_u": 0.1, "alpha_v": 0.3}}, "shapes": [{"type": "rectangle", "bsdf": "m"}]}
    d = parse_scene(ok, file="s.yaml")
    assert len(d.bsdfs) == 1
