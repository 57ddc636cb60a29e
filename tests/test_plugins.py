"""User-written models (tirender/plugins.py, docs/plugins.md): a BSDF, an emitter, a medium and an integrator
defined here, outside the package, registered, rendered, differentiated, loaded from YAML and Mitsuba XML and
listed by docgen; each fault of a declaration is one ConfigError line naming the class; and the Mitsuba tutorial
port demos/custom_bsdf.py passes its own gradient check.

Registering changes the registries for the whole process, so every check runs in one child process of this file
(``--child``: its JSON report, shared by the tests below); the other tests of a pytest worker never see these
models. The child's kernels: one path kernel and one PRB kernel for a scene holding the plugin BSDF and the plugin
emitter next to their built-in twins (the same kernels render both arrangements).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if __name__ == "__main__":          # the child: this worktree's tirender and the tests' helpers
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), ROOT]

from child_util import run_child  # noqa: E402
INV_FOUR_PI = 1.0 / (4.0 * np.pi)

# ---- the models (defined outside the package) ----------------------------------------------------------------
import taichi as ti  # noqa: E402

from tirender.integrators.path import WALK_KEYS  # noqa: E402
from tirender.plugins import (HOMOGENEOUS, SMOOTH, SPECTRUM, AtPosition, BsdfSample, Child, DeltaEmitter,  # noqa: E402
                              Number, Texture, Vec3, Volume, emitter_slot, invalid_sample, lit, point_source, slot_rgb,
                              slot_rgb_adjoint, square_to_cosine_hemisphere, square_to_cosine_hemisphere_pdf, struct,
                              vec2, vec3)


class PluginDiffuse:
    """A copy of the Lambertian BSDF written as a user model (its pure functions only: register_bsdf applies
    ``leaf``); differentiable: reflectance."""
    NAME = "plugin_diffuse"
    KEYS = (Texture("reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo ρ"),)
    FLAGS = SMOOTH
    Params = struct(reflectance=SPECTRUM)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return PluginDiffuse.Params(reflectance=slot_rgb(st, ctx, 0))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, 0, g.reflectance)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        res = p.reflectance * 0.0
        if wi[2] > 0.0 and wo[2] > 0.0:
            res = p.reflectance * ((1.0 / np.pi) * wo[2])
        return res

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        res = 0.0
        if wi[2] > 0.0 and wo[2] > 0.0:
            res = square_to_cosine_hemisphere_pdf(wo)
        return res

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] > 0.0:
            wo = square_to_cosine_hemisphere(u2)
            pd = square_to_cosine_hemisphere_pdf(wo)
            if pd > 0.0 and wo[2] > 0.0:
                s = BsdfSample(wo=wo, weight=p.reflectance, pdf=pd, eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        g = PluginDiffuse.Params(reflectance=d_out * 0.0)
        if wi[2] > 0.0 and wo[2] > 0.0:
            g.reflectance = d_out * ((1.0 / np.pi) * wo[2])
        return g

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        go = vec3(0.0)
        if wi[2] > 0.0 and wo[2] > 0.0:
            go = vec3(0.0, 0.0, d_out.dot(p.reflectance) * (1.0 / np.pi))
        return vec3(0.0), go


# PluginDiffuse's own declarations, before registration adds the generated ``*_at`` functions: faulty variants of it
_PURE = {k: v for k, v in PluginDiffuse.__dict__.items() if not k.startswith("__")}


class PowerPoint(AtPosition, DeltaEmitter):
    """A point light given by its radiant power Φ (W): intensity Φ / 4π; differentiable: power."""
    NAME = "power_point"
    KEYS = (Texture("power", 3, default=1.0, lo=0.0, doc="radiant power Φ (W)"),
            Vec3("position", default=(0.0, 0.0, 0.0), doc="position"))

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds, dist2 = point_source(st, e, ref_p)       # the library's point-source geometry (emitters/point.py)
        if ds.dist > 0.0:
            ds.scale = INV_FOUR_PI / dist2          # eval (DeltaEmitter): power × scale
            ds = lit(ds, emitter_slot(st, e, 0, ds.uv) * ds.scale)
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        z = 1.0 - 2.0 * u_dir[0]
        r = ti.sqrt(ti.max(0.0, 1.0 - z * z))
        phi = 2.0 * np.pi * u_dir[1]
        return (st.em_pos[e], vec3(r * ti.cos(phi), r * ti.sin(phi), z), vec3(0.0), vec2(0.5),
                emitter_slot(st, e, 0, vec2(0.5)), 0.0)


class Fog:
    """A thin homogeneous fog: σt defaults to 0.05 m⁻¹, albedo 0.99 (a declaration: the walk does the rest)."""
    NAME = "fog"
    KEYS = (Volume("sigma_t", 3, default=0.05, lo=0.0, grid=False, doc="extinction σt (m⁻¹)"),
            Volume("albedo", 3, default=0.99, lo=0.0, hi=1.0, grid=False, doc="single-scattering albedo"),
            Number("scale", default=1.0, lo=0.0, doc="multiplies σt"),
            Child("phase", default="isotropic", kind="phase function", doc="`isotropic` or {type: hg, g: ...}"))
    FLAGS = HOMOGENEOUS
    SIGMA = "sigma_t"


class LuminancePath:
    """A path tracer that returns the image's luminance in every channel (wraps ``path``)."""
    NAMES = ("luminance_path",)
    KEYS = WALK_KEYS

    @staticmethod
    def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
        from tirender.core.math import LUMINANCE
        from tirender.integrators import path
        img = path.render(scene, spp, seed, sensor, progress, "path", sample_offset, clear)
        return np.repeat((img @ np.asarray(LUMINANCE, np.float32))[..., None], 3, axis=2).astype(np.float32)


def _scene(swap, w=16):
    """A diffuse floor and sphere lit by two point lights. swap=False: floor ``diffuse``, sphere ``plugin_diffuse``,
    lamp a ``point`` (intensity I), lamp2 a ``power_point`` (power 4π I'); swap=True: the other way round (the same
    image). The BSDF and emitter masks are the same either way: one kernel per pass for both."""
    lamps = [{"id": "lamp", "type": "point", "position": [1.0, -1.0, 3.0], "intensity": [6.0, 5.0, 4.0]},
             {"id": "lamp2", "type": "power_point", "position": [-1.5, 1.0, 2.5],
              "power": (4 * np.pi * np.array([3.0, 4.0, 5.0])).tolist()}]
    if swap:
        lamps = [{"id": "lamp", "type": "power_point", "position": [1.0, -1.0, 3.0],
                  "power": (4 * np.pi * np.array([6.0, 5.0, 4.0])).tolist()},
                 {"id": "lamp2", "type": "point", "position": [-1.5, 1.0, 2.5], "intensity": [3.0, 4.0, 5.0]}]
    floor, ball = ("plugin_diffuse", "diffuse") if swap else ("diffuse", "plugin_diffuse")
    return {
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [{"type": "perspective", "fov": 50, "fov_axis": "x",
                     "to_world": {"look_at": {"origin": [0, -3, 3], "target": [0, 0, 0.3], "up": [0, 0, 1]}},
                     "film": {"width": w, "height": w, "filter": {"type": "box"}}}],
        "bsdfs": {"floor": {"type": floor, "reflectance": [0.6, 0.5, 0.4]},
                  "ball": {"type": ball, "reflectance": [0.3, 0.7, 0.5]}},
        "emitters": lamps,
        "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor", "to_world": [{"scale": 3.0}]},
                   {"id": "ball", "type": "sphere", "bsdf": "ball", "to_world": [{"scale": 0.6}, {"translate": [0, 0, 0.6]}]}],
    }


XML = """<scene version="3.0.0">
    <integrator type="luminance_path"><integer name="max_depth" value="3"/></integrator>
    <bsdf type="plugin_diffuse" id="mat"><rgb name="reflectance" value="0.2, 0.4, 0.6"/></bsdf>
    <emitter type="power_point" id="bulb"><point name="position" x="0" y="0" z="2"/>
        <rgb name="power" value="10, 20, 30"/></emitter>
    <shape type="rectangle" id="floor"><ref id="mat"/></shape>
    <sensor type="perspective"><float name="fov" value="45"/>
        <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="8"/><integer name="height" value="8"/></film></sensor>
</scene>
"""


def _declaration_errors():
    """The one-line refusals of faulty declarations (message per case, "no error" where none is raised)."""
    from child_util import error_messages
    from tirender import plugins
    from tirender.errors import ConfigError

    def variant(name, **attrs):
        return type(name, (), dict(_PURE, **attrs))

    def without(name, attr):
        return type(name, (), {k: v for k, v in _PURE.items() if k != attr})

    class NoRender:
        NAMES = ("no_render",)
        KEYS = ()

    class NoAlbedoFog:
        NAME = "no_albedo_fog"
        KEYS = Fog.KEYS[:1] + Fog.KEYS[2:]
        FLAGS = Fog.FLAGS
        SIGMA = "sigma_t"

    NoSampleRay = type("NoSampleRay", (DeltaEmitter,), {k: v for k, v in PowerPoint.__dict__.items()
                                                        if k != "sample_ray" and not k.startswith("__")})
    NoSampleRay.NAME = "no_sample_ray"
    wide = tuple(Texture(f"t{i}", 1, default=0.0) for i in range(40))
    cases = {
        "no_name": lambda: plugins.register_bsdf(without("NoName", "NAME")),
        "keys_not_tuple": lambda: plugins.register_bsdf(variant("BadKeys", NAME="bad_keys", KEYS=["reflectance"])),
        "missing_sample": lambda: plugins.register_bsdf(variant("NoSample", NAME="no_sample", sample=None)),
        "not_taichi": lambda: plugins.register_bsdf(variant("PlainPdf", NAME="plain_pdf",
                                                            pdf=staticmethod(lambda p, wi, wo: 0.0))),
        "bad_flags": lambda: plugins.register_bsdf(variant("BadFlags", NAME="bad_flags", FLAGS=1 << 10)),
        "no_params": lambda: plugins.register_bsdf(variant("NoParams", NAME="no_params", Params=None)),
        "name_taken": lambda: plugins.register_bsdf(variant("Impostor", NAME="diffuse")),
        "widens_after_scenes": lambda: plugins.register_bsdf(variant("Wide", NAME="wide", KEYS=wide)),
        "emitter_missing": lambda: plugins.register_emitter(NoSampleRay),
        "medium_missing": lambda: plugins.register_medium(NoAlbedoFog),
        "integrator_missing": lambda: plugins.register_integrator(NoRender),
    }
    return dict(zip(cases, error_messages(cases.values(), ConfigError)))


def child():
    """The checks, in this process (a child of the tests): the report as a dict."""
    import tempfile
    import time

    import tirender
    from tirender import docgen, plugins
    from tirender.bsdfs import registry as bsdfs
    from tirender.core.math import LUMINANCE
    from tirender.emitters import registry as emitters

    t0 = time.time()
    out = {}
    builtin = {m.NAME: m.TAG for m in bsdfs.MODELS}
    n_before = len(bsdfs.MODELS)
    assert tirender.register_bsdf(PluginDiffuse) is PluginDiffuse
    plugins.register_bsdf(PluginDiffuse)                    # again: a no-op
    plugins.register_emitter(PowerPoint)
    plugins.register_medium(Fog)
    plugins.register_integrator(LuminancePath)
    out["registry"] = dict(tags_kept={m.NAME: m.TAG for m in bsdfs.MODELS[:n_before]} == builtin,
                           appended=len(bsdfs.MODELS) == n_before + 1 and bsdfs.MODELS[-1] is PluginDiffuse,
                           tag=PluginDiffuse.TAG, leaf=hasattr(PluginDiffuse, "eval_at"),
                           by_name=bsdfs.BY_NAME.get("plugin_diffuse") is PluginDiffuse,
                           all_mask=bsdfs.ALL == (1 << len(bsdfs.MODELS)) - 1,
                           leaves=bool(bsdfs.LEAVES >> PluginDiffuse.TAG & 1),
                           emitter=emitters.BY_NAME.get("power_point") is PowerPoint)

    # renders: the plugins and their built-in twins swapped give the same image (same seed, same kernels)
    a, b = tirender.load_scene(_scene(False)), tirender.load_scene(_scene(True))
    ia = tirender.render(a, spp=4, seed=3, progress=False)
    ib = tirender.render(b, spp=4, seed=3, progress=False)
    out["render"] = dict(max_abs=float(np.abs(ia - ib).max()), mean=float(ia.mean()))
    t1 = time.time()

    # gradients: the plugin's equal diffuse's (swapped, same seed); the plugin emitter's = point's / 4π; FD check
    rng = np.random.default_rng(1)
    wts = rng.uniform(0.2, 1.0, ia.shape).astype(np.float32) / ia[..., 0].size
    ga = tirender.render_grad(a, wts, spp=4, seed=5, progress=False)
    gb = tirender.render_grad(b, wts, spp=4, seed=5, progress=False)
    out["grad"] = dict(ball=[ga["ball.reflectance"].tolist(), gb["ball.reflectance"].tolist()],
                       floor=[ga["floor.reflectance"].tolist(), gb["floor.reflectance"].tolist()],
                       lamp=[(ga["lamp.intensity"] * INV_FOUR_PI).tolist(), gb["lamp.power"].tolist()],
                       lamp2=[ga["lamp2.power"].tolist(), (gb["lamp2.intensity"] * INV_FOUR_PI).tolist()])
    from gradcheck_util import projected_gradients
    u = np.array([1.0, -0.5, 0.8], np.float32)
    g, f = projected_gradients(a, "ball.reflectance", u, wts, 4, range(100, 108), range(8), 0.05)
    out["fd"] = dict(prb=g.tolist(), fd=f.tolist())
    t2 = time.time()

    # the integrator: luminance of path's image
    il = tirender.render(a, spp=4, seed=3, integrator="luminance_path", progress=False)
    out["integrator"] = dict(max_abs=float(np.abs(il[..., 1] - ia @ np.asarray(LUMINANCE, np.float32)).max()),
                             grey=bool(np.all(il[..., 0] == il[..., 2])))

    # YAML (a dict here) and Mitsuba XML take the types; the medium parses
    tmp = tempfile.mkdtemp()
    xml = os.path.join(tmp, "plugins.xml")
    with open(xml, "w") as fh:
        fh.write(XML)
    sx = tirender.load_scene(xml)
    out["xml"] = dict(params=sorted(sx.params.keys()),
                      reflectance=np.asarray(sx.params["mat.reflectance"]).ravel().tolist(),
                      power=np.asarray(sx.params["bulb.power"]).ravel().tolist(),
                      integrator=sx.integrator["type"], max_depth=sx.integrator["max_depth"])
    fog_scene = dict(_scene(False), integrator={"type": "volpath", "max_depth": 3})
    fog_scene["shapes"] = fog_scene["shapes"] + [{"id": "cloud", "type": "cube", "bsdf": {"type": "null"},
                                                  "interior": {"type": "fog", "sigma_t": [0.1, 0.2, 0.3]}}]
    sf = tirender.load_scene(fog_scene)
    out["medium"] = dict(sigma_t=np.asarray(sf.params["cloud.sigma_t"]).ravel().tolist(),
                         albedo=np.asarray(sf.params["cloud.albedo"]).ravel().tolist(),
                         tag=sf.desc.media[0].type, fog_tag=Fog.TAG)
    try:
        tirender.load_scene(dict(_scene(False), bsdfs={"floor": {"type": "plugin_diffuse", "reflectanse": 0.5},
                                                       "ball": {"type": "diffuse"}}))
        out["typo"] = "no error"
    except tirender.ConfigError as e:
        out["typo"] = str(e)

    # docgen lists every plugin
    md = docgen.markdown()
    out["docgen"] = {n: f"### `{n}`" in md for n in ("plugin_diffuse", "power_point", "fog", "luminance_path")}

    # after scenes were built: a model that fits the tables joins and renders; one that widens them is refused
    late = type("LateDiffuse", (), dict(_PURE, NAME="late_diffuse"))
    plugins.register_bsdf(late)
    il8 = tirender.render(dict(_scene(False, w=8), bsdfs={"floor": {"type": "late_diffuse"},
                                                          "ball": {"type": "late_diffuse"}}), spp=1, progress=False)
    out["late"] = dict(tag=late.TAG, finite=bool(np.isfinite(il8).all()), mean=float(il8.mean()))
    out["errors"] = _declaration_errors()
    out["times"] = dict(render=t1 - t0, grad=t2 - t1, rest=time.time() - t2)
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_child(__file__, ["--child"], tmp_path_factory.mktemp("plugins"), timeout=900)


def test_registry_tables(report):
    r = report["registry"]
    assert r == dict(r, tags_kept=True, appended=True, leaf=True, by_name=True, all_mask=True, leaves=True,
                     emitter=True), r


def test_plugin_renders_as_its_builtin_twin(report):
    r = report["render"]
    assert r["mean"] > 1e-3, r
    assert r["max_abs"] <= 1e-4 * max(1.0, r["mean"]), r


def test_plugin_gradients_match_builtin_and_fd(report):
    from gradcheck_util import assert_agree
    g = report["grad"]
    for name, (x, y) in g.items():
        x, y = np.asarray(x), np.asarray(y)
        assert np.abs(x).max() > 0, name
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-6 * np.abs(y).max(), err_msg=name)
    assert_agree(np.asarray(report["fd"]["prb"]), np.asarray(report["fd"]["fd"]), "plugin_diffuse reflectance")


def test_plugin_integrator(report):
    r = report["integrator"]
    assert r["grey"] and r["max_abs"] < 1e-5, r


def test_yaml_and_xml_take_plugins(report):
    x = report["xml"]
    assert "mat.reflectance" in x["params"] and "bulb.power" in x["params"], x
    np.testing.assert_allclose(x["reflectance"], [0.2, 0.4, 0.6], rtol=1e-6)
    np.testing.assert_allclose(x["power"], [10, 20, 30], rtol=1e-6)
    assert x["integrator"] == "luminance_path" and x["max_depth"] == 3, x
    m = report["medium"]
    assert m["tag"] == m["fog_tag"], m
    np.testing.assert_allclose(m["sigma_t"], [0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(m["albedo"], [0.99] * 3, rtol=1e-6)
    assert "reflectanse" in report["typo"] and "reflectance" in report["typo"] and "\n" not in report["typo"]


def test_docgen_lists_plugins(report):
    assert all(report["docgen"].values()), report["docgen"]


def test_registration_after_scenes(report):
    r = report["late"]
    assert r["finite"] and r["mean"] > 0, r
    msg = report["errors"]["widens_after_scenes"]
    assert msg.startswith("register_bsdf(Wide): ") and "register models before loading scenes" in msg, msg


EXPECTED = {
    "no_name": ("register_bsdf(NoName): ", "no NAME"),
    "keys_not_tuple": ("register_bsdf(BadKeys): ", "KEYS must be a tuple of tirender.schema keys"),
    "missing_sample": ("register_bsdf(NoSample): ", "missing sample (a leaf BSDF writes fetch, fetch_adjoint, f, "
                                                    "pdf, sample, f_adjoint, f_grad_dirs)"),
    "not_taichi": ("register_bsdf(PlainPdf): ", "pdf must be a Taichi function"),
    "bad_flags": ("register_bsdf(BadFlags): ", "FLAGS must be a bitmask"),
    "no_params": ("register_bsdf(NoParams): ", "Params must be its parameter record"),
    "name_taken": ("register_bsdf(Impostor): ", "the name 'diffuse' is taken by tirender.bsdfs.diffuse.Diffuse"),
    "emitter_missing": ("register_emitter(NoSampleRay): ", "missing sample_ray"),
    "medium_missing": ("register_medium(NoAlbedoFog): ", "KEYS need a Volume key 'albedo'"),
    "integrator_missing": ("register_integrator(NoRender): ", "missing render("),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_declaration_errors_are_one_line(report, case):
    msg = report["errors"][case]
    start, part = EXPECTED[case]
    assert msg.startswith(start) and part in msg and "\n" not in msg, msg


def test_custom_bsdf_demo_check(tmp_path):
    """demos/custom_bsdf.py (Mitsuba's custom-plugin tutorial): its render and its --check of the tint gradient."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TIRENDER_VARIANT", None)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "demos", "custom_bsdf.py"), "--check", "--res", "16",
                           "--spp", "4", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                          cwd=ROOT, env=env)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "agree" in proc.stdout and os.path.exists(tmp_path / "tinted_dielectric.png")


if __name__ == "__main__" and "--child" in sys.argv:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, ROOT)
    import tirender.backend as backend
    backend.init("cpu")
    print(json.dumps(child()))
