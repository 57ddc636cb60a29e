"""The reconstruction filter: a Gaussian of any width is applied in full (not truncated to the
5x5 pixel-local block), in the image and in the adjoint pass's weights."""
import numpy as np
import pytest

import tirender
from scenes import camera


def _edge_scene(stddev):
    """A one-sided emitter of radiance 1 covering x < 0 of the view, black elsewhere: the edge falls
    on the boundary between columns 15 and 16 of a 32-pixel-wide image."""
    cam = camera([0, 0, 5], [0, 0, 0], fov=40, w=32, h=8)
    cam["film"]["filter"] = {"type": "gaussian", "stddev": stddev}
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 1},
        "sensors": [cam],
        "shapes": [{"type": "rectangle", "to_world": [{"scale": 10.0}, {"translate": [-10.0, 0, 0]}],
                    "emitter": {"type": "area", "radiance": 1.0}}]})


def _profile(stddev, cols):
    """Analytic column values: ∫_{u<16} w(c + 0.5 - u) du / ∫ w (Mitsuba's truncated Gaussian, r = 4σ)."""
    r = 4 * stddev
    d = np.linspace(-r, r, 20001)
    w = np.maximum(0, np.exp(-d * d / (2 * stddev ** 2)) - np.exp(-r * r / (2 * stddev ** 2)))
    return np.array([w[(c + 0.5 - d) < 16.0].sum() / w.sum() for c in cols])


@pytest.mark.parametrize("stddev", [0.5, 1.0])
def test_gaussian_edge_profile(stddev):
    sc = _edge_scene(stddev)
    img = tirender.render(sc, spp=256, seed=3, progress=False)
    cols = np.arange(10, 22)
    got = img[2:6, cols, 0].mean(0)
    want = _profile(stddev, cols)
    assert np.allclose(got, want, atol=0.02), (got, want)
    if stddev > 0.5:   # 2.5 pixels from the edge is still blurred (a 5x5 block would give exactly 0)
        assert 0.004 < got[np.where(cols == 18)[0][0]] < 0.01


def test_wide_gaussian_adjoint_weights():
    """render_grad of a constant adjoint with a wide filter: the gradient of Σ y w.r.t. radiance equals
    Σ y / radiance (the image is linear in it), which needs the full filter weights W_p."""
    sc = _edge_scene(1.0)
    img = tirender.render(sc, spp=64, seed=3, progress=False)
    g = tirender.render_grad(sc, np.ones_like(img), spp=64, seed=4, progress=False)
    name = [k for k in sc.params.keys() if k.endswith("radiance")][0]
    assert abs(float(np.sum(g[name])) - float(img.sum())) < 0.03 * float(img.sum())
