"""The spectral_polarized variant (issue 15; core/mueller.py, integrators/stokes.py, bsdfs/polarizer.py):
Mueller algebra against the Fresnel equations, the analytic experiments the issue names (Malus's law, crossed
polarizers, Brewster's angle, a quarter-wave plate), a two-sided mirror's back face, refusals, and Stokes
S0–S3 against Mitsuba 3's scalar_spectral_polarized.

The renders run in one child process in spectral_polarized (``python tests/test_polarization.py --child``,
its report as JSON). Its scenes all hold the same set of models (a ``ZOO`` of small shapes outside every
view, two wrappers among them: twosided and mask), so the child compiles one Stokes kernel for its surfaces, and
one volume Stokes kernel for exactly an absorbing slab's models (a user's kernel, backend.share_kernels off). The
extended lane has every wrapper (blendbsdf, normalmap too; their kernel compiles for minutes) and the parity
scene with a medium against Mitsuba, in children of their own."""
import json
import os
import sys

import numpy as np
import pytest

from child_util import error_messages, run_child

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PARITY_XML = os.path.join(ROOT, "benchmarks", "parity", "scenes", "polarized.xml")
PARITY = {"res": 16, "spp": 64, "seeds": 6}               # the default lane's budget (the test's bounds scale
PARITY_EXTENDED = {"res": 32, "spp": 64, "seeds": 6}      # with the noise); the extended lane's
MEDIUM_XML = os.path.join(ROOT, "benchmarks", "parity", "scenes", "polarized_medium.xml")
MEDIUM = {"res": 32, "spp": 32, "seeds": 4}
ETA = 1.5


# ------------------------------------------------------------------------------------------- host side
def _fresnel_np(cos_i, eta):
    """Complex amplitudes (r_s, r_p) of a dielectric or conductor (eta complex), light from outside."""
    eta = np.asarray(eta, complex)
    sin2 = 1.0 - cos_i ** 2
    cos_t = np.sqrt(1.0 - sin2 / eta ** 2 + 0j)
    rs = (cos_i - eta * cos_t) / (cos_i + eta * cos_t)
    rp = (eta * cos_i - cos_t) / (eta * cos_i + cos_t)
    return rs, rp


@pytest.fixture(scope="module")
def mueller_kernels():
    import taichi as ti
    import tirender
    tirender.init(arch="cpu")
    from tirender.bsdfs.fresnel import fresnel_conductor, fresnel_dielectric
    from tirender.core import mueller as mu
    from tirender.core.math import vec3

    n = 64
    out = ti.Matrix.field(4, 4, ti.f32, shape=(3, n))
    ref = ti.Vector.field(3, ti.f32, shape=n)
    cosv = ti.field(ti.f32, shape=n)

    @ti.kernel
    def run(eta: ti.f32, k: ti.f32):
        for i in range(n):
            c = cosv[i]
            out[0, i] = mu.specular_reflection(c, eta, k)
            out[1, i] = mu.specular_transmission(c, eta)
            out[2, i] = mu.rotator(c) @ mu.rotator(-c)
            f, _, _, _ = fresnel_dielectric(c, eta)
            ref[i] = vec3(f, fresnel_conductor(ti.abs(c), vec3(eta), vec3(k))[0], 0.0)

    def call(cos, eta, k=0.0):
        cosv.from_numpy(np.asarray(cos, np.float32))
        run(eta, k)
        return out.to_numpy(), ref.to_numpy()
    return call, n


def test_specular_reflection_is_the_fresnel_equations(mueller_kernels):
    """M00 = (R_s + R_p)/2 (the unpolarized Fresnel value the walk uses), M01 = (R_s − R_p)/2, M22 = M33 =
    √(R_s R_p) cos δ for a dielectric and a conductor; R_p = 0 at Brewster's angle."""
    call, n = mueller_kernels
    cos = np.linspace(0.02, 1.0, n)
    for eta, k in ((ETA, 0.0), (0.2, 3.0)):
        m, ref = call(cos, eta, k)
        rs, rp = _fresnel_np(cos, eta + 1j * k)
        Rs, Rp = np.abs(rs) ** 2, np.abs(rp) ** 2
        R = m[0]
        for got, want in ((R[:, 0, 0], 0.5 * (Rs + Rp)), (R[:, 0, 1], 0.5 * (Rs - Rp)),
                          (np.hypot(R[:, 2, 2], R[:, 3, 2]), np.sqrt(Rs * Rp))):
            assert np.abs(got - want).max() < 1e-4, (eta, np.abs(got - want).max())
        assert np.allclose(R[:, 0, 0], ref[:, 0] if k == 0 else ref[:, 1], atol=2e-5)
    mb, _ = call([np.cos(np.arctan(ETA))] * n, ETA)
    assert abs(mb[0][0, 0, 0] - mb[0][0, 0, 1]) < 1e-6            # R_p = 0: reflected light is s-polarized


def test_dielectric_reflection_plus_transmission_conserves_energy(mueller_kernels):
    """R + T = 1 for every row of the unpolarized part (M00 and M01) from both sides, below the critical angle,
    and rotators compose to the identity."""
    call, n = mueller_kernels
    for cos in (np.linspace(0.05, 1.0, n), -np.linspace(0.76, 1.0, n)):   # inside: sin θc = 1/1.5 ↔ cos 0.745
        m, _ = call(cos, ETA)
        assert np.allclose(m[0][:, 0, 0] + m[1][:, 0, 0], 1.0, atol=3e-5)
        assert np.allclose(m[0][:, 0, 1] + m[1][:, 0, 1], 0.0, atol=3e-5)
        assert np.allclose(m[2], np.eye(4)[None], atol=1e-5)
        # a valid Mueller matrix keeps every Stokes vector physical: S0 >= |(S1, S2, S3)|
        s = np.random.default_rng(0).normal(size=(200, 4))
        s[:, 0] = np.linalg.norm(s[:, 1:], axis=1)
        for M in (m[0], m[1]):
            o = np.einsum("nij,kj->nki", M, s)
            assert np.all(o[..., 0] >= np.linalg.norm(o[..., 1:], axis=-1) - 1e-4)


def test_stokes_views(tmp_path):
    """io/stokes.py: DoLP, AoLP and DoCP of known Stokes vectors, and the files written."""
    from tirender.io.stokes import NAMES, angle_of_linear, degree_of_circular, degree_of_linear, save_stokes_set
    S = np.zeros((4, 2, 3, 3), np.float32)
    S[0] = 2.0
    S[1, 0] = 1.0                         # row 0: half linearly polarized along x
    S[2, 1] = -2.0                        # row 1: fully linear at −45°
    S[3, 1, 2] = 2.0                      # pixel (1, 2): also circular (unphysical, but the views are ratios)
    assert np.allclose(degree_of_linear(S)[0], 0.5) and np.allclose(degree_of_linear(S)[1], 1.0)
    assert np.allclose(angle_of_linear(S)[0], 0.0) and np.allclose(angle_of_linear(S)[1], -np.pi / 4)
    assert np.isclose(degree_of_circular(S)[1, 2], 1.0) and degree_of_circular(S)[0, 0] == 0.0
    save_stokes_set(str(tmp_path), S)
    assert all((tmp_path / n).is_file() for n in NAMES)
    assert np.array_equal(np.load(tmp_path / "stokes.npy"), S)


def test_polarizer_and_retarder_in_rgb_transmit_unpolarized_power():
    """Outside spectral_polarized the elements are neutral filters (Mitsuba 3): a polarizer passes 0.5 T of
    unpolarized light whatever its angle, a retarder T; the Stokes output's S1..S3 are 0."""
    import tirender
    tirender.init(arch="cpu")
    from tirender import variants
    if variants.name() != "rgb":
        pytest.skip("the rgb variant's behaviour")
    sc = tirender.load_scene(element_scene(0.0, 90.0, res=4, fov=5.0, integrator="path"))
    img = tirender.render(sc, spp=2, seed=0, progress=False)
    assert np.allclose(img, 0.25, atol=1e-6)
    sc = tirender.load_scene(element_scene(0.0, 45.0, second="retarder", res=4, fov=5.0, integrator="path",
                                           transmittance=0.5))
    S = tirender.render_stokes(sc, spp=2, seed=0, progress=False)
    assert np.allclose(S[0], 0.25, atol=1e-6) and np.all(S[1:] == 0.0)


def test_mitsuba_xml_stokes_nests_path():
    from tirender.config import load_config
    from tirender.errors import ConfigError
    cfg = load_config(PARITY_XML, defines={"res": "8", "spp": "4"})
    assert cfg["scene"]["integrator"] == {"type": "stokes", "max_depth": 6}
    cfg = load_config(MEDIUM_XML, defines={"res": "8", "spp": "4"})
    assert cfg["scene"]["integrator"] == {"type": "stokes", "max_depth": 8}     # nested volpath: media's walk
    bad = open(PARITY_XML).read().replace('<integrator type="path">', '<integrator type="ptracer">')
    p = os.path.join(os.path.dirname(PARITY_XML), "_bad_stokes.xml")
    try:
        with open(p, "w") as f:
            f.write(bad)
        with pytest.raises(ConfigError, match="nested 'path' or 'volpath'"):
            load_config(p, defines={"res": "8", "spp": "4"})
    finally:
        os.remove(p)


# ------------------------------------------------------------------------------------------- scenes
GOLD = {"type": "conductor", "material": "Au"}
ZOO = {"polarizer": {"type": "polarizer"}, "retarder": {"type": "retarder"}, "dielectric": {"type": "dielectric"},
       "conductor": GOLD, "roughconductor": {"type": "roughconductor"}, "diffuse": {"type": "diffuse"},
       "twosided": {"type": "twosided", "bsdf": GOLD}, "mask": {"type": "mask", "opacity": 1.0, "bsdf": GOLD}}
# the wrappers' child (extended lane: every wrapper expands the nested models' Mueller code, a long compile)
WRAPPERS = {"conductor": GOLD, "diffuse": {"type": "diffuse"}, "plastic": {"type": "plastic"},
            "twosided": {"type": "twosided", "bsdf": GOLD}, "mask": {"type": "mask", "opacity": 1.0, "bsdf": GOLD},
            "blend": {"type": "blendbsdf", "weight": 0.0, "bsdf_0": GOLD, "bsdf_1": {"type": "diffuse"}},
            "normalmap": {"type": "normalmap", "normalmap": [0.5, 0.5, 1.0], "bsdf": GOLD}}


def _zoo(models=None):
    """Small shapes behind the camera, one per model, so that every scene of a child compiles one kernel."""
    out = []
    for i, (name, b) in enumerate((models or ZOO).items()):
        out.append({"id": f"zoo_{name}", "type": "rectangle", "bsdf": b,
                    "to_world": [{"scale": 0.01}, {"translate": [50.0 + i, 50.0, 50.0]}]})
    out.append({"id": "zoo_light", "type": "rectangle", "emitter": {"type": "area", "radiance": 0.0},
                "to_world": [{"scale": 0.01}, {"translate": [40.0, 50.0, 50.0]}]})
    # an analytic sphere (as the parity scene's): every scene on the storage with quadrics (one compile, not two)
    out.append({"id": "zoo_sphere", "type": "sphere", "bsdf": next(iter((models or ZOO).values())),
                "to_world": [{"scale": 0.01}, {"translate": [40.0, 52.0, 50.0]}]})
    return out


def element_scene(theta1, theta2, second="polarizer", res=8, fov=1.0, integrator="stokes", transmittance=1.0,
                  delta=90.0):
    """A camera on the +z axis looking through two thin elements (the light meets the polarizer at z = 0.5 with
    theta1 first, then ``second`` at z = 1 with theta2) at a white sky."""
    el = {"type": second, "theta": theta2, "transmittance": transmittance}
    if second == "retarder":
        el["delta"] = delta
    return {"integrator": {"type": integrator, "max_depth": 6},
            "sensors": [{"fov": fov, "to_world": {"look_at": {"origin": [0, 0, 3], "target": [0, 0, 0], "up": [0, 1, 0]}},
                         "film": {"width": res, "height": res, "filter": {"type": "box"}}}],
            "shapes": [{"id": "p1", "type": "rectangle", "bsdf": {"type": "polarizer", "theta": theta1},
                        "to_world": [{"scale": 2.0}, {"translate": [0, 0, 0.5]}]},
                       {"id": "p2", "type": "rectangle", "bsdf": el, "to_world": [{"scale": 2.0}, {"translate": [0, 0, 1.0]}]}],
            "emitters": [{"type": "constant", "radiance": 1.0}]}


def _child_scene(sc, models=None):
    sc = dict(sc)
    sc["shapes"] = list(sc["shapes"]) + _zoo(models)
    return sc


def brewster_scene(flip=False, bsdf=None):
    """A large glass plane (transmission off) seen at Brewster's angle under a white sky; flip: the plane turned
    over (its back faces the camera)."""
    tb = np.arctan(ETA)
    o = [3.0 * np.sin(tb), 0.0, 3.0 * np.cos(tb)]
    tw = [{"scale": 20.0}] + ([{"rotate": {"axis": [1, 0, 0], "angle": 180}}] if flip else [])
    b = bsdf or {"type": "dielectric", "int_ior": ETA, "ext_ior": 1.0, "specular_transmittance": 0.0}
    return {"integrator": {"type": "stokes", "max_depth": 4},
            "sensors": [{"fov": 1.0, "to_world": {"look_at": {"origin": o, "target": [0, 0, 0], "up": [0, 0, 1]}},
                         "film": {"width": 4, "height": 4, "filter": {"type": "box"}}}],
            "shapes": [{"id": "plane", "type": "rectangle", "bsdf": b, "to_world": tw}],
            "emitters": [{"type": "constant", "radiance": 1.0}]}


# ------------------------------------------------------------------------------------------- the child
def child(extended=False):
    import tirender
    from tirender.errors import ConfigError
    tirender.set_variant("spectral_polarized")
    tirender.init(arch="cpu")
    from tirender.io.stokes import degree_of_circular, degree_of_linear

    def stokes(sc, spp=4, seed=0):
        return tirender.render_stokes(tirender.load_scene(_child_scene(sc)), spp=spp, seed=seed, progress=False)

    # the parity scene first: it sizes the scene storage, which the smaller scenes then share (one compile: the
    # zoo's analytic sphere gives every scene the parity scene's storage features); Mitsuba's render is made by the
    # parent
    from tirender.config import load_config
    par = PARITY_EXTENDED if extended else PARITY
    cfg = load_config(PARITY_XML, defines={"res": str(par["res"]), "spp": str(par["spp"])})
    cfg["scene"] = _child_scene(cfg["scene"])
    psc = tirender.scene_from_config(cfg)
    imgs = np.stack([tirender.render_stokes(psc, spp=par["spp"], seed=100 + s, progress=False)
                     for s in range(par["seeds"])])
    np.save(os.path.join(os.environ["TIRENDER_TEST_OUT"], "parity.npy"), imgs)
    rep = {}
    s0 = {}
    for t2 in (0.0, 30.0, 60.0, 90.0):
        S = stokes(element_scene(0.0, t2))
        s0[t2] = float(S[0].mean())
    rep["malus"] = {str(k): v for k, v in s0.items()}
    neutral = element_scene(0.0, 0.0)
    for sh in neutral["shapes"]:
        sh["bsdf"]["polarizing"] = False
    rep["malus_neutral"] = float(stokes(neutral)[0].mean())      # 0.25 of the sky at the same wavelengths
    S = stokes(element_scene(0.0, 45.0, second="retarder", delta=90.0))
    rep["qwp_docp"] = float(np.abs(degree_of_circular(S)).min())
    rep["qwp_dolp"] = float(degree_of_linear(S).max())
    S = stokes(element_scene(0.0, 22.5, second="retarder", delta=180.0))   # half-wave plate: 0° -> 45°
    rep["hwp"] = (S[1:3].mean(-1) / S[0].mean(-1)).reshape(2, -1).tolist()   # per pixel: S1/S0, S2/S0
    front = stokes(brewster_scene(), spp=64)
    tot = front.reshape(4, 1, -1, 3).mean(2, keepdims=True)           # the image's Stokes vector
    rep["brewster_dolp"] = float(degree_of_linear(tot).min())
    rep["brewster_pixel_dolp"] = float(degree_of_linear(front)[front[0].mean(-1) > 0].min())
    rep["brewster_s0"] = float(front[0].mean())

    # wrappers keep the nested Mueller matrix: a two-sided gold mirror seen from its back, an opaque mask
    gold = stokes(brewster_scene(bsdf=GOLD))
    back = stokes(brewster_scene(bsdf=ZOO["twosided"], flip=True))
    rep["wrappers"] = {"scale": float(np.abs(gold[1:]).max()), "twosided_dolp": float(degree_of_linear(back).mean()),
                       "twosided": float(np.abs(back - gold).max()),
                       "mask": float(np.abs(stokes(brewster_scene(bsdf=ZOO["mask"])) - gold).max())}
    rep["slab"] = slab_checks(stokes)

    sc = tirender.load_scene(_child_scene(element_scene(0.0, 0.0, integrator="path")))
    rep["refusals"] = error_messages(
        (lambda: tirender.render(sc, spp=1, integrator="ptracer", progress=False),
         lambda: tirender.render_grad(sc, np.ones((8, 8, 3), np.float32), spp=1, method="rb", progress=False)),
        ConfigError)
    print(json.dumps(rep))


SLAB = {"sigma_t": 0.7, "thickness": 0.5}


def slab_checks(stokes):
    """Light polarized at 0° (two parallel polarizers) through an absorbing homogeneous slab (albedo 0) on the
    kernels a user's process compiles (exactly these models): its S0 and the same scene's without the slab
    (per-channel means, standard errors over 4 seeds), and the smallest degree of linear polarization of a pixel."""
    import tirender
    from tirender import backend
    from tirender.io.stokes import degree_of_linear
    out = {}
    was = backend.share_kernels()
    backend.share_kernels(False)
    try:
        t = SLAB["thickness"]
        for name, z in (("open", 50.0), ("slab", 1.5 + t / 2)):     # open: the slab behind the camera
            sc = element_scene(0.0, 0.0)
            sc["shapes"].append({"id": "slab", "type": "cube", "bsdf": {"type": "null"},
                                 "interior": {"type": "homogeneous", "sigma_t": SLAB["sigma_t"], "albedo": 0.0},
                                 "to_world": [{"scale": [3.0, 3.0, t / 2]}, {"translate": [0, 0, z]}]})
            S = np.stack([tirender.render_stokes(tirender.load_scene(sc), spp=64, seed=40 + k, progress=False)
                          for k in range(4)])
            m = S[:, 0].reshape(4, -1, 3).mean(1)
            out[name] = {"mean": m.mean(0).tolist(), "se": (m.std(0, ddof=1) / 2).tolist(),
                         "dolp": float(degree_of_linear(S.mean(0))[S.mean(0)[0].mean(-1) > 0].min())}
    finally:
        backend.share_kernels(was)
    return out


def wrappers_child():
    import tirender
    tirender.set_variant("spectral_polarized")
    tirender.init(arch="cpu")
    from tirender.io.stokes import degree_of_linear

    def stokes(bsdf, flip=False):
        sc = _child_scene(brewster_scene(bsdf=bsdf, flip=flip), WRAPPERS)
        return tirender.render_stokes(tirender.load_scene(sc), spp=4, seed=0, progress=False)
    gold = stokes(GOLD)
    back = stokes(WRAPPERS["twosided"], flip=True)
    rep = {"twosided_diff": float(np.abs(back - gold).max()), "twosided_dolp": float(degree_of_linear(back).mean()),
           "wrappers": {k: float(np.abs(stokes(WRAPPERS[k]) - gold).max()) for k in ("twosided", "mask", "blend",
                                                                                  "normalmap")},
           "wrappers_scale": float(np.abs(gold[1:]).max()),
           "depolarizers": {k: float(degree_of_linear(stokes(WRAPPERS[k])).max()) for k in ("diffuse", "plastic")}}
    print(json.dumps(rep))


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("polarized")


@pytest.fixture(scope="module")
def report(out_dir, extended):
    return run_child(__file__, ["--child"], out_dir, extended=extended)


def test_malus_law_and_crossed_polarizers(report):
    """Unpolarized light through two ideal polarizers: S0 ∝ cos²(θ2 − θ1) (Malus), half of the light when
    parallel, and crossed ones transmit < 1e-4 of the parallel case."""
    s0 = {float(k): v for k, v in report["malus"].items()}
    assert abs(s0[0.0] / report["malus_neutral"] - 2.0) < 1e-4, (s0, report["malus_neutral"])   # half the sky
    for t, v in s0.items():
        assert abs(v / s0[0.0] - np.cos(np.radians(t)) ** 2) < 1e-4, (t, v)
    assert s0[90.0] / s0[0.0] < 1e-4, s0


def test_quarter_wave_plate_makes_circular_light(report):
    """Linear light through a quarter-wave plate at 45°: |S3|/S0 >= 0.999, no linear part left."""
    assert report["qwp_docp"] >= 0.999, report
    assert report["qwp_dolp"] < 0.03, report


def test_half_wave_plate_rotates_linear_light(report):
    """A half-wave plate at 22.5° turns 0° linear light to 45°: in every pixel S2/S0 = ±1 (one sign for the whole
    image) and S1/S0 = 0."""
    s1, s2 = (np.array(c) for c in report["hwp"])
    assert s2.size == 64 and np.all(np.abs(s2) >= 0.999), s2
    assert np.all(np.sign(s2) == np.sign(s2[0])), s2
    assert np.all(np.abs(s1) <= 0.03), s1


def test_brewster_reflection_is_s_polarized(report):
    """A smooth dielectric seen at Brewster's angle reflects only the s component: DoLP >= 0.999 (the image's and
    every lit pixel's), and S0 is R_s/2 of the white sky (R_s = 0.1479 for η = 1.5; the path picks reflection
    with probability F, so S0 is a binomial estimate: 1024 samples, within 4 SE ≈ 25 %)."""
    assert report["brewster_dolp"] >= 0.999 and report["brewster_pixel_dolp"] >= 0.999, report
    rs, _ = _fresnel_np(np.cos(np.arctan(ETA)), ETA)
    F = 0.5 * abs(rs) ** 2
    assert abs(report["brewster_s0"] / F - 1.0) < 4 * np.sqrt((1 - F) / (F * 1024)), report


def test_twosided_and_mask_keep_the_nested_mueller_matrix(report):
    """A gold mirror wrapped in twosided and seen from its back (the plane turned over: the mirrored frame's
    Mueller matrix is mirrored back, core/mueller.py mirror_z_lanes), and in an opaque mask, gives the bare
    mirror's Stokes images; gold polarizes (the extended lane: blendbsdf and normalmap too, and depolarizers)."""
    w = report["wrappers"]
    assert w["scale"] > 1e-3 and w["twosided_dolp"] > 0.05, w
    assert w["twosided"] < 1e-5 and w["mask"] < 1e-5, w


def test_absorbing_medium_keeps_the_polarization(report):
    """spectral_polarized with a medium (the volume Stokes walk, a user's exact kernel): an absorbing slab of
    σt = 0.7 and thickness 0.5 seen at normal incidence transmits exp(-σt d) of the polarized light's S0
    (within 4 standard errors) and leaves every pixel fully polarized (the extended lane: Mitsuba's parity scene
    with fog)."""
    r = report["slab"]
    T = np.exp(-SLAB["sigma_t"] * SLAB["thickness"])
    o, sl = np.array(r["open"]["mean"]), np.array(r["slab"]["mean"])
    se = np.hypot(T * np.array(r["open"]["se"]), r["slab"]["se"])
    assert np.all(np.abs(sl - T * o) <= 4 * se) and np.all(se < 0.02 * sl), (sl, T * o, se)
    assert r["open"]["dolp"] >= 0.999 and r["slab"]["dolp"] >= 0.999, r


@pytest.mark.extended
def test_wrappers_keep_the_nested_mueller_matrix(tmp_path):
    """A gold mirror wrapped in twosided, an opaque mask, a blend of weight 0 and a flat normal map gives the bare
    mirror's Stokes images, and so does a two-sided one seen from its back (the plane turned over: the mirrored
    frame's Mueller matrix is mirrored back, core/mueller.py mirror_z_lanes); gold polarizes; diffuse and plastic
    depolarize (as Mitsuba's)."""
    report = run_child(__file__, ["--wrappers-child"], tmp_path)
    assert report["twosided_diff"] < 1e-5 and report["twosided_dolp"] > 0.05, report
    assert report["wrappers_scale"] > 1e-3
    for k, d in report["wrappers"].items():
        assert d < 1e-5, (k, d)
    for k, d in report["depolarizers"].items():
        assert d < 1e-5, (k, d)


def test_polarized_refusals_are_one_line(report):
    r = report["refusals"]
    assert "integrator 'ptracer' is not available in variant 'spectral_polarized'" in r[0], r
    assert "not available in variant 'spectral_polarized'" in r[1] and "'rb'" in r[1], r
    assert all("\n" not in x for x in r)


@pytest.mark.parity
def test_stokes_parity_with_mitsuba(report, out_dir, extended):
    """benchmarks/parity/scenes/polarized.xml (a glass and a gold sphere, a rough aluminium floor, a diffuse
    wall, area light and sky) rendered by tirender and by Mitsuba 3's scalar_spectral_polarized ``stokes``:
    for each of S0..S3 the per-channel means within 4 combined standard errors and the image RMSE within 1.25×
    the combined noise; S1 and S2 agree pixel by pixel in sign (correlation > 0.5). 16 × 16 in the default lane,
    32 × 32 in the extended one."""
    _compare_stokes(np.load(os.path.join(out_dir, "parity.npy")), PARITY_XML,
                    PARITY_EXTENDED if extended else PARITY)


def _compare_stokes(a, xml, p):
    """tirender's Stokes images a (seeds, 4, H, W, 3) against Mitsuba 3's scalar_spectral_polarized render of xml
    (the same seeds): per component, means within 4 combined standard errors, RMSE within 1.25x the combined noise,
    S1 and S2 correlated pixel by pixel (> 0.5)."""
    pytest.importorskip("mitsuba")
    import mitsuba as mi
    mi.set_variant("scalar_spectral_polarized")
    res, spp, k = p["res"], p["spp"], p["seeds"]
    scene = mi.load_file(xml, res=str(res), spp=str(spp))
    b = np.stack([np.array(mi.render(scene, seed=100 + s, spp=spp))[..., 3:].reshape(res, res, 4, 3)
                  .transpose(2, 0, 1, 3) for s in range(k)])
    for c in range(4):
        ma, mb = a[:, c].reshape(k, -1, 3).mean(1), b[:, c].reshape(k, -1, 3).mean(1)
        se = np.sqrt(ma.var(0, ddof=1) / k + mb.var(0, ddof=1) / k) + 1e-12
        z = (ma.mean(0) - mb.mean(0)) / se
        noise = np.sqrt(np.mean(a[:, c].var(0, ddof=1) / k + b[:, c].var(0, ddof=1) / k))
        rmse = np.sqrt(np.mean((a[:, c].mean(0) - b[:, c].mean(0)) ** 2))
        assert np.all(np.abs(z) <= 4) and rmse / noise <= 1.25, (c, ma.mean(0), mb.mean(0), z, rmse / noise)
        if c in (1, 2):
            corr = np.corrcoef(a[:, c].mean(0).mean(-1).ravel(), b[:, c].mean(0).mean(-1).ravel())[0, 1]
            assert corr > 0.5, (c, corr)


def medium_child():
    import tirender
    tirender.set_variant("spectral_polarized")
    tirender.init(arch="cpu")
    from tirender.config import load_config
    sc = tirender.scene_from_config(load_config(MEDIUM_XML, defines={"res": str(MEDIUM["res"]),
                                                                     "spp": str(MEDIUM["spp"])}))
    imgs = np.stack([tirender.render_stokes(sc, spp=MEDIUM["spp"], seed=100 + s, progress=False)
                     for s in range(MEDIUM["seeds"])])
    np.save(os.path.join(os.environ["TIRENDER_TEST_OUT"], "medium.npy"), imgs)
    s0 = tirender.render(sc, spp=MEDIUM["spp"], seed=100, integrator="volpath", progress=False)
    rep = {"render_vs_stokes": float(np.abs(s0 - imgs[0, 0]).max()), "scale": float(np.abs(s0).max())}
    # prbvolpath in spectral_polarized: the medium's albedo and sigma_t against central differences (correlated
    # random numbers; delta tracking's decisions make sigma_t's differences noisy: a larger h)
    from gradcheck_util import projected_gradients
    cfg = load_config(MEDIUM_XML, defines={"res": "16", "spp": "16"})
    cfg["scene"]["integrator"] = {"type": "prbvolpath", "max_depth": 8}
    gsc = tirender.scene_from_config(cfg)
    wts = np.random.default_rng(2).uniform(0, 1, (16, 16, 3)).astype(np.float32)
    rep["media"] = {}
    for name, h, spp in (("milk.albedo", 1e-2, 64), ("milk.sigma_t", 5e-2, 128)):
        g, f = projected_gradients(gsc, name, np.ones(3, np.float32), wts, spp, list(range(8)), list(range(20, 28)), h)
        rep["media"][name] = {"g": g.tolist(), "f": f.tolist()}
    print(json.dumps(rep))


@pytest.mark.slow
@pytest.mark.extended    # a second polarized megakernel with media (about a minute of compilation)
@pytest.mark.parity
def test_polarized_medium_parity_with_mitsuba(tmp_path):
    """Participating media in spectral_polarized (benchmarks/parity/scenes/polarized_medium.xml: fog in a glass
    sphere, a gold sphere, rough aluminium; stokes measuring volpath): S0..S3 against Mitsuba 3's
    scalar_spectral_polarized as the parity scene's; volpath's image is the Stokes S0 (same random numbers);
    prbvolpath's gradients of the fog's albedo and sigma_t against central differences."""
    from gradcheck_util import assert_agree
    rep = run_child(__file__, ["--medium-child"], tmp_path)
    assert rep["render_vs_stokes"] <= 1e-5 * rep["scale"], rep
    for name, r in rep["media"].items():
        mg, mf, se = assert_agree(np.array(r["g"]), np.array(r["f"]), name)
        print(f"{name}: prbvolpath {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")
    _compare_stokes(np.load(os.path.join(tmp_path, "medium.npy")), MEDIUM_XML, MEDIUM)


if __name__ == "__main__" and "--medium-child" in sys.argv:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    medium_child()
elif __name__ == "__main__" and "--child" in sys.argv:
    sys.path.insert(0, ROOT)
    child("--extended" in sys.argv)
elif __name__ == "__main__" and "--wrappers-child" in sys.argv:
    sys.path.insert(0, ROOT)
    wrappers_child()
