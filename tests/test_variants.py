"""Variants (tirender/variants.py; issue 15): colorimetry, RGB → spectrum upsampling, and the mono and
spectral variants of the path tracer and PRB.

A process holds one variant, so the renders of the mono and spectral variants run in child processes
(this file with ``--child mono|spectral``, one child per variant and module, its report as JSON); the
adjoints of the upsampling run in a float64 child. ``python tests/test_variants.py --child spectral`` runs
a child by hand."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from child_util import run_child
from gradcheck_util import central_differences, max_rel_err

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
REF = os.path.join(ROOT, "tests", "data", "reference", "cbox_spectral", "cbox_spectral_spp1024.npy")
PARITY_DIR = os.path.join(ROOT, "benchmarks", "parity", "scenes")
PARITY_SCENES = ("diffuse_area", "point_directional", "conductor", "homogeneous", "heterogeneous")
PARITY_DEFAULT = ("homogeneous",)    # the default lane's: spectral media rendered against Mitsuba's scalar_spectral
PARITY_DEFINES = {"res": "32", "spp": "16"}


def _parity_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(ROOT, "benchmarks", "parity", "run.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


# ------------------------------------------------------------------------------------------- host side
def test_cie_normalisation_and_wavelength_sampling():
    from tirender.spectra import cie
    # ∫ ȳ dλ of the 5 nm table (CIE: 106.857); Mitsuba 3 normalises by 106.7503 (0.1 % apart)
    assert abs(cie.Y_INTEGRAL - 106.857) < 0.01
    assert abs(cie.Y_INTEGRAL / 106.7502593994 - 1.0) < 2e-3
    # D65 normalised to luminance 1; the sech² density integrates to 1 over 360–830 nm
    lam = np.linspace(cie.LAMBDA_MIN, cie.LAMBDA_MAX, 200001)
    dl = lam[1] - lam[0]
    assert abs((cie.d65(lam) * cie.cmf(lam)[:, 1]).sum() * dl * cie.Y_NORMALIZATION - 1.0) < 1e-4
    pdf = cie.PDF_SCALE / np.cosh(0.0072 * (lam - 538.0)) ** 2
    assert abs(pdf.sum() * dl - 1.0) < 1e-3
    # E[ȳ(λ)/pdf(λ)] = ∫ ȳ: the estimator the film uses is unbiased
    u = (np.arange(400000) + 0.5) / 400000
    lam_s, w = cie.sample_wavelength_np(u)
    assert lam_s.min() >= 359.99 and lam_s.max() <= 830.01
    assert abs((cie.cmf(lam_s)[:, 1] * w).mean() / cie.Y_INTEGRAL - 1.0) < 1e-3
    # D65 white reaches the film as sRGB white
    rgb = (cie.SRGB_BAR * cie.d65(cie.LAMBDA)[:, None]).sum(0) * 5.0 * cie.Y_NORMALIZATION
    assert np.abs(rgb - 1.0).max() < 5e-3


def _spectrum_to_srgb(s, lam):
    """Linear sRGB of reflectance spectra s (N, L) at wavelengths lam (L,) under D65 (white → Y = 1)."""
    from tirender.spectra import cie
    dl = lam[1] - lam[0]
    ill = cie.d65(lam)
    xyz = (s[:, :, None] * (ill[:, None] * cie.cmf(lam))[None]).sum(1) * dl
    xyz /= (ill * cie.cmf(lam)[:, 1]).sum() * dl
    return xyz @ cie.XYZ_TO_SRGB.T


def test_upsampling_round_trip():
    """RGB → spectrum → RGB within Mitsuba 3's own table's error for in-gamut colours (its srgb.coeff: 1.128e-3 at
    most on these colours, at (0.958, 0.978, 0.748); tirender's table has Mitsuba's nodes so that a colour means the
    same spectrum in both; an earlier table with nodes denser towards 0 and 1 reached 0.8e-3, but ~1e-3 away from
    Mitsuba's spectra, which its spectral references resolve), and the special cases."""
    from tirender.spectra import upsample
    rng = np.random.default_rng(0)
    rgb = np.concatenate([rng.uniform(0.02, 0.98, (3000, 3)), [[0.5, 0.5, 0.5], [0.9, 0.1, 0.1], [0.1, 0.9, 0.1],
                                                              [0.1, 0.1, 0.9], [0.570068, 0.0430135, 0.0443706]]])
    lam = np.linspace(360.0, 830.0, 4701)
    back = _spectrum_to_srgb(upsample.eval_np(upsample.fetch_np(rgb), lam[None, :]), lam)
    err = np.abs(back - rgb).max(-1)
    assert err.max() < 1.15e-3 and np.median(err) < 3e-4, (err.max(), rgb[err.argmax()], np.median(err))
    s = upsample.eval_np(upsample.fetch_np(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.3, 0.3, 0.3]])),
                         lam[None, :])
    assert np.all(s[0] == 0.0) and np.all(s[1] == 1.0)
    assert np.abs(s[2] - 0.3).max() < 2e-3      # grey is flat
    assert np.all(upsample.eval_np(upsample.fetch_np(rgb[:50]), lam[None, :]) <= 1.0)


def test_upsampling_matches_mitsuba():
    """Our table (our own fit of the published method, on Mitsuba's nodes) against Mitsuba 3's srgb_model at a few
    wavelengths (measured: at most 8.6e-5, mean 2.7e-6)."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_spectral")
    from tirender.spectra import upsample
    rng = np.random.default_rng(1)
    rgb = rng.uniform(0.05, 0.95, (200, 3))
    lam = np.array([400.0, 450.0, 500.0, 550.0, 600.0, 650.0, 700.0])
    ours = upsample.eval_np(upsample.fetch_np(rgb), lam[None, :])
    theirs = np.array([[mi.srgb_model_eval(mi.srgb_model_fetch(mi.Color3f(*c)), float(l))[0] for l in lam]
                       for c in rgb])
    assert np.abs(ours - theirs).max() < 5e-4
    assert np.abs(ours - theirs).mean() < 1e-5


def test_variant_choice_and_refusals(tmp_path, monkeypatch):
    from tirender import variants
    from tirender.bsdfs import registry as bsdf_registry
    from tirender.api import describe
    from tirender.config import load_config
    from tirender.errors import ConfigError
    cfg = load_config(os.path.join(ROOT, "configs", "cbox_spectral.yaml"))
    describe(cfg)                                            # checked for its own variant, in any process
    for integ in ("pssmlt", "coherent_mcmc"):                # run in every variant (tests/test_mcmc.py)
        for v in ("spectral", "spectral_polarized"):
            describe(dict(cfg, variant=v, scene=dict(cfg["scene"], integrator={"type": integ})))
    principled = dict(cfg, scene=dict(cfg["scene"], bsdfs=dict(cfg["scene"]["bsdfs"], red={"type": "principled"})))
    describe(principled)                                     # every built-in BSDF runs in every variant
    # a model that declares fewer variants (a user plugin's VARIANTS) is refused by name
    monkeypatch.setattr(bsdf_registry.BY_NAME["principled"], "VARIANTS", ("rgb", "mono"), raising=False)
    with pytest.raises(ConfigError, match="BSDF 'principled' is not available in variant 'spectral'"):
        describe(principled)
    with pytest.raises(ConfigError, match="unknown variant 'rbg'"):
        describe(dict(cfg, variant="rbg"))
    describe(dict(cfg, variant="spectral_polarized"))        # the cbox renders polarized too (tests/test_polarization.py)
    with pytest.raises(ConfigError, match="integrator 'ptracer' is not available in variant 'spectral_polarized'"):
        describe(dict(cfg, variant="spectral_polarized", scene=dict(cfg["scene"], integrator={"type": "ptracer"})))
    # a variant is fixed per process once kernels consulted it (this process: rgb)
    variants.rgb()
    with pytest.raises(ConfigError, match="fixed per process"):
        variants.set_variant("spectral")
    variants.set_variant(variants.name())                   # the same one: fine


def test_cli_refuses_a_variant_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tirender", "render", os.path.join(ROOT, "configs", "cbox.yaml"),
                        "--variant", "spectral_polarized", "--integrator", "ptracer", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not available in variant 'spectral_polarized'" in lines[0], r.stderr


# ------------------------------------------------------------------------------------------- children
def _child(variant, out_dir, extended=False):
    """The report of child_checks(variant) (``extended``: also EXTENDED_CHECKS)."""
    return run_child(__file__, ["--child", variant], out_dir, timeout=1200, extended=extended)


@pytest.fixture(scope="module")
def spectral_out(tmp_path_factory):
    return tmp_path_factory.mktemp("spectral")


@pytest.fixture(scope="module")
def spectral_report(spectral_out, extended):
    return _child("spectral", spectral_out, extended)


@pytest.fixture(scope="module")
def mono_report(tmp_path_factory):
    return _child("mono", tmp_path_factory.mktemp("mono"))


def _furnace(env=1.0):
    import scenes
    sc = scenes.furnace_plane({"type": "diffuse", "reflectance": 1.0}, w=16, env=env)
    sc["integrator"] = {"type": "path", "max_depth": 64, "rr_depth": 64}
    return sc


def _grey_box():
    import scenes
    sc = scenes.cornell_like(w=24, max_depth=5, extra_bsdfs={"red": {"type": "diffuse", "reflectance": 0.3},
                                                              "green": {"type": "diffuse", "reflectance": 0.6}})
    sc["shapes"][-1]["emitter"]["radiance"] = 9.0
    return sc


CAUCHY = (1.6, 0.0135)      # int_ior at 589.3 nm, B (µm²)


SELLMEIER_GLASS = "sf11"


def _dispersion_samples(glass=None, bsdf=None):
    """A dispersive dielectric (Cauchy, or a Sellmeier glass; or another BSDF spec) sampled through the renderer's
    dispatch at chosen wavelengths: rows of (λ0, λ1, λ2, wi (3), wo (3), weight (3), pdf, delta) for refraction
    and reflection events."""
    import taichi as ti
    import tirender
    from tirender import variants
    from tirender.bsdfs.base import BsdfCtx
    from tirender.bsdfs.registry import dispatch
    from tirender.core.math import vec2, vec3
    from tirender.scene.scene import bsdf_levels
    flint = {"type": "dielectric", "int_ior": CAUCHY[0], "cauchy_b": CAUCHY[1]} if glass is None else \
        {"type": "dielectric", "sellmeier": glass}
    flint = bsdf or flint
    sc = tirender.load_scene({"sensors": [{"film": {"width": 2, "height": 2}}], "bsdfs": {"flint": flint},
                              "shapes": [{"id": "s", "type": "rectangle", "bsdf": "flint"}]})
    st = sc.bind()
    row = sc.desc.bsdf_ids["flint"]
    D = dispatch(bsdf_levels(sc.desc.bsdfs, [row]))

    @ti.kernel
    def k(st: ti.template(), D: ti.template(), b: ti.i32, inp: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(out.shape[0]):
            lam = variants.spec(inp[i, 2])          # the path's lanes: λ0, λ1, then λ2 in the others
            lam[0] = inp[i, 0]
            lam[1] = inp[i, 1]
            ctx = BsdfCtx(b=b, uv=vec2(0.5), dpdu=vec3(1.0, 0.0, 0.0), dpdv=vec3(0.0, 1.0, 0.0),
                          ng=vec3(0.0, 0.0, 1.0), lam=lam)
            wi = vec3(inp[i, 3], inp[i, 4], inp[i, 5])
            s = D.sample(st, ctx, wi, inp[i, 6], vec2(0.5))
            for c in ti.static(range(3)):
                out[i, c] = s.wo[c]
                out[i, 3 + c] = s.weight[c]
            for c in ti.static(range(3, variants.lanes())):     # the fourth lane ends as the second and third
                out[i, 5] = ti.max(ti.abs(out[i, 5]), ti.abs(s.weight[c]))
            out[i, 6] = s.pdf
            out[i, 7] = s.delta

    rng = np.random.default_rng(3)
    n = 64
    lam = rng.uniform(380.0, 780.0, (n, 3))
    th = rng.uniform(0.05, 1.2, n)
    ph = rng.uniform(0.0, 2 * np.pi, n)
    wi = np.stack([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)], 1)
    wi[n // 2:] *= -1.0                                   # half from inside the glass
    u1 = np.where(np.arange(n) % 4 == 0, 0.0, 0.999999)   # every 4th: the reflection lobe
    inp = np.ascontiguousarray(np.concatenate([lam, wi, u1[:, None]], 1).astype(np.float32))
    res = np.zeros((n, 8), np.float32)
    k(st, D, row, inp, res)
    return np.concatenate([inp[:, :6], res], 1).tolist()


LAMPS = {"blackbody": {"type": "blackbody", "temperature": 5000, "scale": 1e-4},
         "blackbody_warm": {"type": "blackbody", "temperature": 2700, "scale": 3e-4},
         "uniform": {"type": "uniform", "value": 2.0},
         "d65": {"type": "d65", "color": [0.9, 0.5, 0.2], "scale": 2.0}}


def emitter_spectra_checks():
    """A directly seen lamp of each emitter spectrum (tests/test_emitter_spectra.py): the image's mean and its
    standard error, and Σ_c s_c ∂(Σ image)/∂s_c vs Σ image (the image is 1-homogeneous in the lamp's value s)."""
    import tirender
    from test_emitter_spectra import lamp_scene
    out = {}
    for name, rad in LAMPS.items():
        sc = tirender.load_scene(lamp_scene(rad, w=16))
        img = tirender.render(sc, spp=32, seed=2, progress=False).reshape(-1, 3).astype(np.float64)
        small = tirender.render(sc, spp=2, seed=3, progress=False)
        g = tirender.render_grad(sc, np.ones_like(small), spp=2, seed=3, progress=False)["lamp.radiance"]
        out[name] = {"mean": img.mean(0).tolist(), "se": (img.std(0) / np.sqrt(len(img))).tolist(),
                     "euler": float((g.reshape(3) * sc.params["lamp.radiance"].reshape(3)).sum()),
                     "sum": float(small.astype(np.float64).sum())}
    return out


def prism_ptracer_checks(variant=None, grad=True):
    """configs/prism_ptracer.yaml (light tracing a white beam through a dispersive prism onto a screen), small: the
    image-x centroids of its red and blue channels, its total, and Euler's identity for the beam's irradiance E
    (the image is 1-homogeneous in E: Σ_c E_c ∂(Σ image)/∂E_c = Σ image for the same paths)."""
    import tirender
    from tirender.config import load_config
    cfg = load_config(os.path.join(ROOT, "configs", "prism_ptracer.yaml"))
    if variant:
        cfg["variant"] = variant
    sc = tirender.scene_from_config(cfg)
    img = tirender.render(sc, spp=8, seed=1, progress=False).astype(np.float64)
    x = np.arange(img.shape[1])
    cx = [float((img[..., c].sum(0) * x).sum() / img[..., c].sum()) for c in range(3)]
    out = {"centroid_x": cx, "total": float(img.sum()), "width": int(img.shape[1])}
    if grad:
        name = [n for n in sc.params.keys() if n.endswith("irradiance")][0]
        small = tirender.render(sc, spp=1, seed=3, progress=False)
        g = tirender.render_grad(sc, np.ones_like(small), spp=1, seed=3, progress=False)[name]
        out.update(euler=float((g.reshape(-1) * sc.params[name].reshape(-1)).sum()),
                   sum=float(small.astype(np.float64).sum()))
    return out


def prism_path_totals():
    """configs/prism.yaml (a white slit seen through the dispersive prism: two dispersive interfaces per path), small,
    and the same prism without dispersion: image totals (one kernel: the same models)."""
    import copy

    import tirender
    from tirender.config import load_config
    cfg = load_config(os.path.join(ROOT, "configs", "prism.yaml"))
    cfg["scene"]["sensors"][0]["film"].update(width=64, height=40)
    out = {}
    for name, b in (("dispersive", 0.0135), ("plain", None)):
        c = copy.deepcopy(cfg)
        if b is None:
            del c["scene"]["bsdfs"]["flint"]["cauchy_b"]
        else:
            c["scene"]["bsdfs"]["flint"]["cauchy_b"] = b
        img = tirender.render(tirender.scene_from_config(c), spp=32, seed=2, progress=False)
        out[name] = float(img.astype(np.float64).sum())
    return out


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_spectral_dispersion_keeps_the_light(spectral_report):
    """A path through the prism crosses two dispersive faces: the first ends the secondary wavelengths (× 3 on the
    hero), the second must not again — the dispersive prism passes as much light as a plain one (within the
    Fresnel terms' change with η(λ) and noise)."""
    t = spectral_report["prism_path"]
    assert abs(t["dispersive"] / t["plain"] - 1.0) < 0.05, t


def test_spectral_light_tracer_disperses_white_light(spectral_report, extended):
    """The light tracer in spectral: white light through the prism spreads on the screen (blue deviated more than
    red: its centroid lies further along), in rgb it stays one white spot; the dispersion conserves the light
    (totals within the Fresnel transmission's variation with η(λ)); the gradient of the beam's irradiance obeys
    Euler's identity (the adjoint through the film's conversion; in rgb, and in spectral in the extended lane: the
    light tracer's adjoint kernel in spectral compiles for half a minute)."""
    spec = spectral_report["prism_ptracer"]
    rgb = prism_ptracer_checks("rgb")
    sep = spec["centroid_x"][0] - spec["centroid_x"][2]
    assert abs(sep) > 0.03 * spec["width"], spec
    assert abs(rgb["centroid_x"][0] - rgb["centroid_x"][2]) < 0.003 * rgb["width"], rgb
    assert abs(spec["total"] / rgb["total"] - 1.0) < 0.05, (spec["total"], rgb["total"])
    for r in (spec, rgb) if extended else (rgb,):
        assert r["euler"] == pytest.approx(r["sum"], rel=1e-4), r


# the spectral child's checks that compile kernels of their own (the rough and conductor dispersion, the path
# tracer's prism, the RB and forward-mode kernels, prb_attached, the exact prbvolpath gradient kernel, four of the
# five parity scenes: ~7 min cold in all): the extended lane (their tests are marked extended); the default lane
# keeps the spectral path tracer, PRB, the light tracer, a medium's image against Mitsuba (PARITY_DEFAULT) and the
# smooth dispersion
EXTENDED_CHECKS = ("dispersion_rough", "gold", "prism_path", "geometry_grad", "gradcheck_rb", "forward", "volume_grad")


def child_checks(variant, extended=False):
    """Run in a child process of the given variant: renders and gradient checks, reported as JSON (``extended``:
    EXTENDED_CHECKS too)."""
    import tirender
    from tirender import gradcheck, variants
    from tirender.config import load_config
    furnace = tirender.load_scene(_furnace())      # a scene built before the variant is chosen
    tirender.set_variant(variant)
    assert variants.name() == variant
    out = {}
    img = tirender.render(furnace, spp=32, seed=0, progress=False)
    out["furnace_mean"] = img.reshape(-1, 3).mean(0).tolist()
    out["furnace_se"] = (img.reshape(-1, 3).std(0) / np.sqrt(img.shape[0] * img.shape[1])).tolist()
    out["lamps"] = emitter_spectra_checks()
    out["aov_albedo"] = tirender.render(_aov_box(), spp=64, seed=4, progress=False).tolist()
    if variant == "mono":
        out["grey_box"] = tirender.render(_grey_box(), spp=8, seed=3, progress=False).tolist()
        out["mcmc"] = mcmc_checks(("coherent_mcmc",))      # the grey box's kernels: one Markov-chain kernel more
        return out
    out["dispersion"] = _dispersion_samples()
    out["dispersion_sellmeier"] = _dispersion_samples(SELLMEIER_GLASS)
    out["prism_ptracer"] = prism_ptracer_checks(grad=extended)   # the spectral light tracer's adjoint: extended
    if extended:
        out["gold"] = _dispersion_samples(bsdf={"type": "conductor", "material": "Au"})
        out["dispersion_rough"] = _dispersion_samples(bsdf={"type": "roughdielectric", "alpha": 1e-3,
                                                            "int_ior": CAUCHY[0], "cauchy_b": CAUCHY[1]})
        out["prism_path"] = prism_path_totals()
        out["volume_grad"] = spectral_volume_slice()
        out["geometry_grad"] = spectral_geometry_slice()
    out["parity"] = _parity_images(PARITY_SCENES if extended else PARITY_DEFAULT)
    cfg = load_config(os.path.join(ROOT, "configs", "cbox_spectral.yaml"))
    scene = tirender.scene_from_config(cfg)
    img = tirender.render(scene, spp=64, seed=0, progress=False)
    out["cbox_mean"] = img.reshape(-1, 3).mean(0).tolist()
    out["cbox_finite"] = bool(np.isfinite(img).all())
    again = tirender.render(scene, spp=2, seed=5, progress=False)
    out["deterministic"] = bool(np.array_equal(again, tirender.render(scene, spp=2, seed=5, progress=False)))
    import scenes
    box = tirender.load_scene(scenes.cornell_like(w=16, max_depth=4))
    names = ["red.reflectance"] + [n for n in box.params.keys() if n.endswith("radiance")][:1]
    rows = gradcheck.check(box, names, spp=16, seeds=8, h_rel=0.02)
    out["gradcheck"] = [dict(name=r.name, grad=r.grad, fd=r.fd, se=r.se, z=r.z, ok=r.ok) for r in rows]
    if extended:
        out.update(_rb_and_forward_checks(box, names))
    return out


def _rb_and_forward_checks(box, names):
    """(spectral child, extended) unbiased RB and the pipelined joint pass, and forward mode, on the box."""
    import tirender
    from tirender import gradcheck
    out = {}
    # the RB family: unbiased RB against central differences; the pipelined joint pass renders render's image
    rows = gradcheck.check(box, names[:1], spp=16, seeds=8, h_rel=0.02, method="rb")
    out["gradcheck_rb"] = [dict(name=r.name, grad=r.grad, fd=r.fd, se=r.se, z=r.z, ok=r.ok) for r in rows]
    w = np.ones((16, 16, 3), np.float32)
    joint, _ = tirender.render_and_grad(box, w, spp=4, seed=7, method="rb_pipelined")   # rb's kernel
    plain = tirender.render(box, spp=4, seed=7, progress=False)
    out["rb_joint_diff"] = float(np.abs(joint - plain).max())
    out["rb_joint_scale"] = float(np.abs(plain).max())
    # forward mode: the mean of J v along red.reflectance += h (1, 1, 1) against central differences
    v0 = box.params["red.reflectance"].copy()
    jv, fd = [], []
    for k in range(6):
        jv.append(float(tirender.render_forward(box, {"red.reflectance": np.ones(3, np.float32)}, spp=16, seed=k,
                                                progress=False).mean()))
        box.params["red.reflectance"] = v0 + 0.02
        a = float(tirender.render(box, spp=16, seed=k, progress=False).mean())
        box.params["red.reflectance"] = v0 - 0.02
        b = float(tirender.render(box, spp=16, seed=k, progress=False).mean())
        box.params["red.reflectance"] = v0
        fd.append((a - b) / 0.04)
    out["forward"] = dict(jv=float(np.mean(jv)), fd=float(np.mean(fd)),
                          se=float(np.sqrt(np.var(jv, ddof=1) / 6 + np.var(fd, ddof=1) / 6)))
    return out


def _aov_box():
    import scenes
    sc = scenes.cornell_like(w=16, max_depth=4)
    sc["integrator"] = {"type": "aov", "aovs": ["albedo"]}
    return sc


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_spectral_rb_gradients_and_joint_pass(spectral_report):
    """Unbiased RB through the spectral upsampling against central differences; the pipelined joint pass draws
    the wavelengths as ``render`` does, so its image is render's (same seed)."""
    (r,) = spectral_report["gradcheck_rb"]
    assert r["ok"] and abs(r["grad"]) > 5 * r["se"], r
    assert spectral_report["rb_joint_diff"] <= 1e-5 * spectral_report["rb_joint_scale"], spectral_report


def test_aov_albedo_in_every_variant(spectral_report, mono_report):
    """The albedo AOV: mono is the luminance of rgb's exactly; spectral converges to rgb's (the upsampling's
    round trip under D65, plus wavelength noise)."""
    import tirender
    from tirender.variants import LUMINANCE
    rgb = tirender.render(_aov_box(), spp=64, seed=4, progress=False).astype(np.float64)
    mono = np.array(mono_report["aov_albedo"])
    assert np.allclose(mono, (rgb @ np.array(LUMINANCE))[..., None], rtol=1e-5, atol=1e-6)
    spec = np.array(spectral_report["aov_albedo"])
    se = spec.reshape(-1, 3).std(0) / np.sqrt(spec.shape[0] * spec.shape[1])
    diff = spec.reshape(-1, 3).mean(0) - rgb.reshape(-1, 3).mean(0)
    assert np.all(np.abs(diff) <= 4 * se + 2e-3), (diff, se)
    assert np.abs(spec - rgb).mean() < 0.05


def volume_gradient_checks():
    """prbvolpath in the spectral variant against central differences (correlated random numbers): a chromatic
    homogeneous medium's σt and albedo (3 channels: the unbounded and reflectance upsamplings' adjoints) and a
    grid medium's RGB albedo grid."""
    import scenes
    import tirender
    from tirender import gradcheck
    tirender.set_variant("spectral")
    out = []
    hom = scenes.smoke_scene("prbvolpath", w=12)
    hom["media"]["smoke"] = {"type": "homogeneous", "sigma_t": [1.2, 0.6, 0.25], "albedo": [0.9, 0.7, 0.5],
                             "phase": {"type": "hg", "g": 0.3}}
    for spec, names in ((hom, ["smoke.sigma_t", "smoke.albedo"]), (scenes.smoke_scene("prbvolpath", w=12),
                                                                  ["smoke.albedo"])):
        rows = gradcheck.check(tirender.load_scene(spec), names, spp=16, seeds=8, h_rel=0.02)
        out += [dict(name=r.name, grad=r.grad, fd=r.fd, se=r.se, z=r.z, ok=r.ok) for r in rows]
    return out


def _parity_images(names):
    """Spectral child: render the parity scenes `names` (benchmarks/parity/scenes) on the exact kernels (a user's)
    into $TIRENDER_TEST_OUT/<name>.npy, for the parent to compare with Mitsuba's scalar_spectral."""
    from tirender import backend
    parity = _parity_module()
    was = backend.share_kernels()
    try:
        backend.share_kernels(False)
        for name in names:
            r = parity.tirender_run(os.path.join(PARITY_DIR, name + ".xml"), PARITY_DEFINES, 16, 4, [], 0, grad=False)
            np.save(os.path.join(os.environ["TIRENDER_TEST_OUT"], name + ".npy"), r["imgs"])
    finally:
        backend.share_kernels(was)
    return list(names)


def spectral_volume_slice():
    """Spectral child: prbvolpath on the parity scene homogeneous.xml (16x16; the spectral child's volume render
    kernel): the fog's chromatic σt and albedo along all-ones directions, the gradient against central differences
    of the renders with correlated random numbers, both on the exact kernels (a user's: backend.share_kernels off,
    smaller compiles than the suite's superset)."""
    import tirender
    from gradcheck_util import projected_gradients
    from tirender import backend
    sc = tirender.load_scene(os.path.join(PARITY_DIR, "homogeneous.xml"), defines={"res": "16", "spp": "16"})
    w = np.random.default_rng(4).uniform(0, 1, (16, 16, 3)).astype(np.float32)
    out = {}
    was = backend.share_kernels()
    try:
        backend.share_kernels(False)
        for key, h in (("fog.sigma_t.value.value", 0.05), ("fog.albedo.value.value", 0.02)):
            name = sc.params.resolve(key)
            u = np.ones(sc.params[name].shape, np.float32)
            g, _ = projected_gradients(sc, name, u, w, 16, list(range(11, 19)), [], h)
            # the difference quotient is the noisier estimate (a chromatic σt moves the hero wavelength's free
            # flights and decorrelates the ±h paths where a scattering flips): four times PRB's seeds
            _, f = projected_gradients(sc, name, u, w, 16, [], list(range(31, 63)), h)
            out[name] = {"g": g.tolist(), "f": f.tolist()}
    finally:
        backend.share_kernels(was)
    return out


def spectral_geometry_slice():
    """Spectral child: geometry gradients (edge sampling, prb_attached) of tests/test_geometry_gradients.py's
    shadowing cube over coloured surfaces, box-filtered (its render kernel is the box's: diffuse and an area light),
    moved up: attached PRB against central differences with correlated random numbers."""
    import test_geometry_gradients as t
    from gradcheck_util import projected_gradients
    sc = t._shadow(w=16, colours=True, filt="box")
    u = np.array([0.0, 0.0, 1.0], np.float32)
    g, _ = projected_gradients(sc, "occ.translation", u, t._weights(16), 32, list(range(8)), [], 1e-2,
                               method="prb_attached")
    _, f = projected_gradients(sc, "occ.translation", u, t._weights(16), 512, [], list(range(100, 108)), 1e-2)
    return {"g": g.tolist(), "f": f.tolist()}


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_spectral_geometry_gradient(spectral_report):
    """Geometry gradients in the spectral variant (the edge samples' paths carry wavelengths, the boundary terms
    go through the film's conversion): a cube's translation against central differences within 3 SE (the
    extended lane: Gaussian filter, more samples, tests/test_geometry_gradients.py)."""
    from gradcheck_util import assert_agree
    r = spectral_report["geometry_grad"]
    assert_agree(np.array(r["g"]), np.array(r["f"]), "spectral occ.translation")


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS (its exact prbvolpath kernel: ~40 s cold); the default
#                         lane: a spectral medium's image against Mitsuba (test_spectral_parity_with_mitsuba[homogeneous]),
#                         the spectral grids' local adjoints in f64 (tests/test_media_grid_variants.py) and rgb media's
#                         whole-render gradients (tests/test_prbvolpath.py)
def test_spectral_prbvolpath_gradients(spectral_report):
    """Spectral media's gradients (the spectral child, a user's exact gradient kernel): a chromatic homogeneous
    fog's σt and albedo against central differences within 3 SE (and, by its own child, a grid medium too:
    test_spectral_prbvolpath_gradients_vs_finite_differences)."""
    from gradcheck_util import assert_agree
    assert len(spectral_report["volume_grad"]) == 2
    for name, r in spectral_report["volume_grad"].items():
        assert_agree(np.array(r["g"]), np.array(r["f"]), name)


@pytest.mark.extended
def test_spectral_prbvolpath_gradients_vs_finite_differences(tmp_path):
    """Spectral media's gradients (extended lane: the spectral prbvolpath kernel compiles for about a minute; the
    default lane checks spectral media's images against Mitsuba's scalar_spectral, test_spectral_parity_with_mitsuba)."""
    rows = run_child(__file__, ["--volume-child"], tmp_path, timeout=1200)
    assert len(rows) == 3
    for r in rows:
        assert r["ok"] and abs(r["grad"]) > 3 * r["se"], r


def test_spectral_white_furnace(spectral_report):
    """A white diffuse plane under a white (D65) environment: every lane of every path carries D65, the film
    receives sRGB white — 1 per channel within the wavelength-sampling noise."""
    m, se = np.array(spectral_report["furnace_mean"]), np.array(spectral_report["furnace_se"])
    assert np.all(np.abs(m - 1.0) < 0.01 + 4 * se), (m, se)


def test_spectral_cbox_matches_mitsuba(spectral_report):
    """configs/cbox_spectral.yaml at 64 spp against Mitsuba 3's llvm_ad_spectral render at 1024 spp: per-channel
    means within 1 % (the issue asks it at 256 spp; docs/variants.md has that figure)."""
    ref = np.load(REF).reshape(-1, 3).mean(0)
    m = np.array(spectral_report["cbox_mean"])
    assert spectral_report["cbox_finite"]
    assert np.all(np.abs(m / ref - 1.0) < 0.01), (m, ref)
    rgb_ref = np.load(os.path.join(ROOT, "tests", "data", "reference", "cbox", "reference_spp1024.npy"))
    assert abs(m[0] / rgb_ref.reshape(-1, 3).mean(0)[0] - 1.0) > 0.01   # and it is not the RGB image (2.3 % off)


@pytest.mark.parity
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in PARITY_DEFAULT else [pytest.mark.extended])
                                  for n in PARITY_SCENES])
def test_spectral_parity_with_mitsuba(spectral_report, spectral_out, name):
    """A parity scene (benchmarks/parity/scenes) rendered spectrally by tirender and by Mitsuba 3's
    scalar_spectral from the same XML: per-channel means within 3 combined standard errors and the image RMSE
    within 1.2x the combined noise (benchmarks/parity/run.py's criteria)."""
    pytest.importorskip("mitsuba")
    parity = _parity_module()
    ours = {"imgs": np.load(os.path.join(spectral_out, name + ".npy")), "grads": {}}
    theirs = parity.mitsuba_run(os.path.join(PARITY_DIR, name + ".xml"), PARITY_DEFINES, 16, 4, [], 0, grad=False,
                                variant="scalar_spectral")
    r = parity.compare(ours, theirs, name)
    assert np.all(np.abs(r["z"]) <= 3) and r["rmse_ratio"] <= 1.2, (r["mean_ti"], r["mean_mi"], r["z"], r["rmse_ratio"])


def test_prism_dispersion_follows_snell_with_cauchy(spectral_report):
    """Refraction through a dispersive dielectric bends each path's hero wavelength λ0 by Snell's law with the
    Cauchy IOR η(λ0) = (A + B (1/λ0² − 1/λ_D²)) / ext_ior, ends the other two lanes (weight × (3, 0, 0)) and keeps
    reflection's mirror direction."""
    rows = np.array(spectral_report["dispersion"], np.float64)
    lam, wi, wo, w = rows[:, :3], rows[:, 3:6], rows[:, 6:9], rows[:, 9:12]
    A, B = CAUCHY
    l_um = lam[:, 0] * 1e-3
    eta = (A + B * (1.0 / l_um ** 2 - 1.0 / 0.5893 ** 2)) / 1.000277       # relative to ext_ior (air)
    eta = np.where(wi[:, 2] > 0, eta, 1.0 / eta)          # from inside: the inverse ratio
    refr = wo[:, 2] * wi[:, 2] < 0
    assert refr.sum() >= 30 and (~refr).sum() >= 10
    sin_i = np.hypot(wi[refr, 0], wi[refr, 1])
    sin_t = np.hypot(wo[refr, 0], wo[refr, 1])
    assert np.abs(sin_i - eta[refr] * sin_t).max() < 2e-5          # Snell, per wavelength
    assert np.all(w[:, 1:] == 0.0) and np.all(w[:, 0] > 0.0)
    assert np.allclose(wo[~refr], wi[~refr] * np.array([-1.0, -1.0, 1.0]), atol=1e-6)
    spread = A + B * (1.0 / 0.4 ** 2 - 1.0 / 0.7 ** 2) - A
    assert spread > 0.05                                            # the lanes really differ (400 vs 700 nm)


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_rough_dielectric_disperses_like_the_smooth_one(spectral_report):
    """roughdielectric with a Cauchy IOR (α = 0.001, the microfacet normal sampled at the lobe's centre): the hero
    wavelength refracts by Snell's law with η(λ0), the other two lanes end (weight × (3, 0, 0)), a smooth lobe."""
    rows = np.array(spectral_report["dispersion_rough"], np.float64)
    lam, wi, wo, w, delta = rows[:, :3], rows[:, 3:6], rows[:, 6:9], rows[:, 9:12], rows[:, 13]
    A, B = CAUCHY
    l_um = lam[:, 0] * 1e-3
    eta = (A + B * (1.0 / l_um ** 2 - 1.0 / 0.5893 ** 2)) / 1.000277
    eta = np.where(wi[:, 2] > 0, eta, 1.0 / eta)
    refr = (wo[:, 2] * wi[:, 2] < 0) & (np.abs(w).sum(1) > 0)
    assert refr.sum() >= 25
    sin_i = np.hypot(wi[refr, 0], wi[refr, 1])
    sin_t = np.hypot(wo[refr, 0], wo[refr, 1])
    assert np.abs(sin_i - eta[refr] * sin_t).max() < 1e-4                    # not η(λ_D): 0.03 off at 400 nm
    assert np.all(w[:, 1:] == 0.0) and np.all(delta == 0)


def test_prism_dispersion_follows_snell_with_sellmeier(spectral_report):
    """The same with a Sellmeier glass (N-SF11): η(λ0) = n(λ0) / ext_ior, n² = 1 + Σ B λ² / (λ² − C)."""
    from tirender.bsdfs.ior import GLASSES, sellmeier
    rows = np.array(spectral_report["dispersion_sellmeier"], np.float64)
    lam, wi, wo, w = rows[:, :3], rows[:, 3:6], rows[:, 6:9], rows[:, 9:12]
    eta = sellmeier(GLASSES[SELLMEIER_GLASS], lam[:, 0]) / 1.000277
    eta = np.where(wi[:, 2] > 0, eta, 1.0 / eta)
    refr = wo[:, 2] * wi[:, 2] < 0
    assert refr.sum() >= 30
    sin_i = np.hypot(wi[refr, 0], wi[refr, 1])
    sin_t = np.hypot(wo[refr, 0], wo[refr, 1])
    assert np.abs(sin_i - eta[refr] * sin_t).max() < 2e-5
    assert np.all(w[:, 1:] == 0.0) and np.all(w[:, 0] > 0.0)
    n = sellmeier(GLASSES[SELLMEIER_GLASS], [400.0, 700.0])
    assert n[0] - n[1] > 0.04                                       # dense flint: strongly dispersive


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_spectral_conductor_uses_measured_ior(spectral_report):
    """A named conductor (gold) in the spectral variant reflects each lane with the complex Fresnel factor of its
    measured η(λ) + i k(λ) (Mitsuba's data: spectra/conductors.py), not of its RGB fit."""
    from tirender.spectra import conductors
    rows = np.array(spectral_report["gold"], np.float64)
    lam, wi, wo, w = rows[:, :3], rows[:, 3:6], rows[:, 6:9], rows[:, 9:12]
    up = wi[:, 2] > 0
    assert up.sum() >= 30
    ek = conductors.eta_k_np("Au", lam[up])                     # (n, 3, 2)
    n = ek[..., 0] + 1j * ek[..., 1]
    c = wi[up, 2][:, None]
    cos_t = np.sqrt(1.0 - (1.0 - c * c) / (n * n))
    rs = (c - n * cos_t) / (c + n * cos_t)
    rp = (n * c - cos_t) / (n * c + cos_t)
    F = 0.5 * (np.abs(rs) ** 2 + np.abs(rp) ** 2)
    assert np.abs(w[up] - F).max() < 2e-5, np.abs(w[up] - F).max()
    assert np.allclose(wo[up], wi[up] * np.array([-1.0, -1.0, 1.0]), atol=1e-6)
    assert F[lam[up] < 480].mean() < 0.5 < F[lam[up] > 600].mean()   # gold: dark in the blue, bright in the red


def test_sellmeier_in_rgb_is_its_sodium_d_index_and_bad_input_is_one_line():
    """rgb: a Sellmeier glass renders exactly as int_ior = n(589.3 nm); conflicting or bad keys are one line."""
    import tirender
    from tirender.bsdfs.ior import GLASSES, sellmeier
    from tirender.errors import ConfigError

    def scene(glass):
        return {"integrator": {"type": "path", "max_depth": 4},
                "sensors": [{"fov": 40, "to_world": {"look_at": {"origin": [0, 0, 3], "target": [0, 0, 0], "up": [0, 1, 0]}},
                             "film": {"width": 8, "height": 8}}],
                "shapes": [{"id": "ball", "type": "sphere", "bsdf": dict(type="dielectric", **glass)}],
                "emitters": [{"type": "constant", "radiance": 1.0}]}
    n_d = float(sellmeier(GLASSES["bk7"], 589.3))
    a = tirender.render(tirender.load_scene(scene({"sellmeier": "bk7"})), spp=4, seed=1, progress=False)
    b = tirender.render(tirender.load_scene(scene({"int_ior": n_d})), spp=4, seed=1, progress=False)
    assert np.array_equal(a, b)
    for glass, key, problem in (({"sellmeier": "bk7", "cauchy_b": 0.01}, "sellmeier", "either cauchy_b or sellmeier"),
                                ({"sellmeier": "bk7", "int_ior": 1.6}, "int_ior", "leave int_ior out"),
                                ({"sellmeier": "crown"}, "sellmeier", "unknown glass 'crown'"),
                                ({"sellmeier": [1, 0, 0, 0.3, 0, 0]}, "sellmeier", "pole"),
                                ({"sellmeier": [1, 0, 0]}, "sellmeier", "six numbers")):
        with pytest.raises(ConfigError) as e:
            tirender.load_scene(scene(glass))
        msg = str(e.value)
        assert key in msg and problem in msg and "\n" not in msg, msg


def test_spectral_deterministic(spectral_report):
    assert spectral_report["deterministic"]


def test_spectral_prb_gradients_vs_finite_differences(spectral_report):
    """PRB through the spectral upsampling (a reflectance and an emitter's RGB radiance) against central
    differences with correlated random numbers."""
    rows = spectral_report["gradcheck"]
    assert len(rows) == 2
    for r in rows:
        assert r["ok"], r
        assert abs(r["grad"]) > 5 * r["se"], r           # a gradient, not noise


@pytest.mark.extended   # the spectral child's EXTENDED_CHECKS
def test_spectral_forward_mode_vs_finite_differences(spectral_report):
    f = spectral_report["forward"]
    assert abs(f["jv"] - f["fd"]) <= max(4 * f["se"], 0.03 * abs(f["fd"])), f
    assert abs(f["jv"]) > 5 * f["se"], f


def _expected_lamp(name):
    from tirender.spectra import blackbody, cie
    rad = LAMPS[name]
    if rad["type"] == "blackbody":
        return rad["scale"] * blackbody.srgb(rad["temperature"])
    if rad["type"] == "d65":
        return rad["scale"] * np.array(rad["color"])
    lam = np.linspace(cie.LAMBDA_MIN, cie.LAMBDA_MAX, 47001)      # uniform: the sRGB of illuminant E
    return rad["value"] * np.trapezoid(cie.interp(cie.SRGB_BAR, lam), lam, axis=0) * cie.Y_NORMALIZATION


@pytest.mark.parametrize("name", list(LAMPS))
def test_spectral_emitter_spectra(spectral_report, name):
    """Spectral: a directly seen black body (Planck's law at the sampled wavelengths), uniform and D65 lamp has
    the sRGB its spectrum integrates to (within the wavelength-sampling noise; d65: the colour within the
    upsampling's round trip); PRB's gradient of the lamp's value obeys Euler's identity exactly (same paths)."""
    r = spectral_report["lamps"][name]
    m, se, ref = np.array(r["mean"]), np.array(r["se"]), _expected_lamp(name)
    assert np.all(np.abs(m - ref) <= 4 * se + 3e-3 * ref.max()), (name, m, ref, se)
    if name != "d65":
        assert np.all(se > 0)                       # the wavelengths vary per path
    assert r["euler"] == pytest.approx(r["sum"], rel=1e-4), r


def test_mono_emitter_spectra(mono_report):
    """mono: each lamp is the luminance of its RGB counterpart, in all three channels."""
    from tirender.variants import LUMINANCE
    for name in LAMPS:
        r = mono_report["lamps"][name]
        y = float(np.array(LUMINANCE) @ _expected_lamp(name))
        assert np.allclose(r["mean"], y, rtol=1e-5), (name, r["mean"], y)
        assert r["euler"] == pytest.approx(r["sum"], rel=1e-4), r


def test_mono_furnace_and_grey_scene(mono_report):
    """mono: the furnace is 1; a grey scene renders exactly as in rgb (same random numbers, Y of grey = grey)."""
    import tirender
    m = np.array(mono_report["furnace_mean"])
    assert np.abs(m - 1.0).max() < 0.01
    mono = np.array(mono_report["grey_box"], dtype=np.float32)
    rgb = tirender.render(_grey_box(), spp=8, seed=3, progress=False)
    assert np.allclose(mono, rgb, rtol=1e-5, atol=1e-6)
    assert np.allclose(mono[..., 0], mono[..., 1], rtol=1e-6) and np.allclose(mono[..., 0], mono[..., 2], rtol=1e-6)


# ------------------------------------------------------------------------------------------- f64 adjoints
def f64_checks():
    """(name -> max relative error vs central differences): the upsampling's adjoints, fp = f64, spectral."""
    import taichi as ti
    from tirender import variants
    from tirender.core.math import vec3
    rng = np.random.default_rng(0)
    variants.prepare()
    out = {}

    n = variants.lanes()                         # the walk's lanes (4 wavelengths)
    lane_w = [1.3, 0.7, 2.0, 1.1][:n]            # the film's weights 1/pdf per lane

    @ti.kernel
    def val(which: ti.i32, x: ti.types.ndarray(), l: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        rgb = vec3(x[0], x[1], x[2])
        L = ti.Vector([x[i] for i in ti.static(range(n))])
        lv = ti.Vector([l[i] for i in ti.static(range(n))])
        gs = ti.Vector([g[i] for i in ti.static(range(n))])
        res = 0.0
        if which == 3:
            res = variants.to_rgb(L, lv, ti.Vector(lane_w)).dot(vec3(g[0], g[1], g[2]))
        else:
            v = variants.spec(0.0)
            if which == 0:
                v = variants.reflectance(rgb, lv)
            elif which == 1:
                v = variants.emission(rgb, lv)
            elif which == 2:
                v = variants.unbounded(rgb, lv)
            else:
                v = variants.emission_spectrum(rgb, lv, which - 4, 4100.0)
            res = v.dot(gs)
        return res

    @ti.kernel
    def adj(which: ti.i32, x: ti.types.ndarray(), l: ti.types.ndarray(), g: ti.types.ndarray(),
            o: ti.types.ndarray()):
        rgb = vec3(x[0], x[1], x[2])
        lv = ti.Vector([l[i] for i in ti.static(range(n))])
        d = ti.Vector([g[i] for i in ti.static(range(n))])
        if which == 3:
            r = variants.adjoint_from_rgb(vec3(g[0], g[1], g[2]), lv, ti.Vector(lane_w))
            for i in ti.static(range(n)):
                o[i] = r[i]
        else:
            r = vec3(0.0)
            if which == 0:
                r = variants.reflectance_adjoint(rgb, lv, d)
            elif which == 1:
                r = variants.emission_adjoint(rgb, lv, d)
            elif which == 2:
                r = variants.unbounded_adjoint(rgb, lv, d)
            else:
                r = variants.emission_spectrum_adjoint(rgb, lv, which - 4, 4100.0, d)
            for i in ti.static(range(3)):
                o[i] = r[i]

    for which, name, scale in ((0, "reflectance", 1.0), (1, "emission (D65)", 20.0), (2, "unbounded (eta, k)", 3.0),
                               (3, "film: lanes -> sRGB", 5.0), (4, "emitter spectrum: RGB (D65)", 20.0),
                               (5, "emitter spectrum: black body", 2.0), (6, "emitter spectrum: uniform", 4.0)):
        errs = []
        while len(errs) < 100:
            x = rng.uniform(0.03, 0.97, n) * scale       # an RGB value (x[:3]), or the lanes' radiance (film)
            l = rng.uniform(365.0, 825.0, n)
            g = rng.normal(size=n)
            a = np.zeros(n)
            adj(which, x, l, g, a)
            fd = central_differences(lambda y: val(which, y, l, g), x, 1e-7 * scale)
            fd2 = central_differences(lambda y: val(which, y, l, g), x, 2e-7 * scale)
            if max_rel_err(fd, fd2) > 1e-5:       # the step crossed a cell of the coefficient table: a kink
                continue
            errs.append(max_rel_err(a, fd))
        out[name] = {"max_rel_err": max(errs), "cases": len(errs)}
    return out


def test_upsampling_adjoints_vs_central_differences_f64():
    env = dict(os.environ, TIRENDER_VARIANT="spectral")
    code = ("import sys; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); import json, test_variants as t; print(json.dumps(t.f64_checks()))"
            % (ROOT, os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    assert len(report) == 7
    for name, r in report.items():
        assert r["cases"] >= 100 and r["max_rel_err"] <= 1e-5, (name, r)


def mcmc_checks(integrators=("pssmlt", "coherent_mcmc")):
    """Mono child: the grey box by path and the Markov-chain integrators (image means and their noise)."""
    import tirender
    tirender.set_variant("mono")
    sc = tirender.load_scene(_grey_box())
    out = {}
    for integ in ("path",) + tuple(integrators):
        imgs = [tirender.render(sc, spp=64, seed=s, integrator=integ, progress=False) for s in range(4)]
        m = np.array([i.reshape(-1, 3).mean(0) for i in imgs])
        out[integ] = {"mean": m.mean(0).tolist(), "se": (m.std(0, ddof=1) / 2).tolist(),
                      "grey": float(max(np.abs(i[..., 0] - i[..., 1]).max() for i in imgs))}
    return out


def _mcmc_agrees_in_mono(rep, integrators):
    ref = rep["path"]
    for integ in integrators:
        r = rep[integ]
        assert r["grey"] == 0.0, (integ, r)
        se = np.hypot(r["se"][0], ref["se"][0])
        assert abs(r["mean"][0] - ref["mean"][0]) <= 4 * se + 0.01 * ref["mean"][0], (integ, r, ref)


def test_coherent_mcmc_in_mono(mono_report):
    """coherent_mcmc runs in mono (the mono child): a grey image whose mean agrees with the path tracer's (the
    extended lane: pssmlt too, tests/test_mcmc.py: both in spectral and spectral_polarized)."""
    _mcmc_agrees_in_mono(mono_report["mcmc"], ("coherent_mcmc",))


@pytest.mark.slow
@pytest.mark.extended       # a mono child compiling both Markov-chain kernels
def test_mcmc_in_mono(tmp_path):
    """pssmlt and coherent_mcmc run in mono: grey images whose mean agrees with the path tracer's."""
    _mcmc_agrees_in_mono(run_child(__file__, ["--mcmc-child"], tmp_path), ("pssmlt", "coherent_mcmc"))


if __name__ == "__main__" and "--mcmc-child" in sys.argv:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, ROOT)
    import tirender.backend as backend
    backend.init("cpu")
    print(json.dumps(mcmc_checks()))
elif __name__ == "__main__" and "--volume-child" in sys.argv:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, ROOT)
    import tirender.backend as backend
    backend.init("cpu")
    print(json.dumps(volume_gradient_checks()))
elif __name__ == "__main__" and "--child" in sys.argv:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, ROOT)
    import tirender.backend as backend
    backend.init("cpu")
    print(json.dumps(child_checks(sys.argv[sys.argv.index("--child") + 1], "--extended" in sys.argv)))
