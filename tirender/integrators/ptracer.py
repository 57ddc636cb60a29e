"""Light tracer (Mitsuba 3 ``ptracer``): paths start at the emitters and every vertex is connected
to the camera, splatting through the film's reconstruction filter.

One light path per (pixel, sample) index — spp · W · H paths for ``spp`` — so that its cost and its
noise are comparable to the path tracer's at the same spp. A path: an emitter picked uniformly, a
ray of its light (``emitters.registry.sample_ray``: β = Le |cos| / (p_sel pdf_pos pdf_dir)); at
each surface vertex with a non-Dirac lobe, the camera connection (``sensors.registry.camera_connect``: Mitsuba's
sample_direction of the perspective or thin lens camera; a thin lens draws its 2D lens sample at every vertex)
adds β f*(ω_L → ω_C) |cos θ_C| W_cam into the film at the connection's film position (``film.
splat_light``: w·L, no filter weight); then the adjoint BSDF is sampled and Russian roulette is
played as in the path tracer. Importance transport: f*(ω_L → ω_C) = f(ω_C, ω_L) (the BSDF's
arguments swapped), refraction without the radiance compression 1/η² (sampled weights times
η²), and shading normals corrected as in pbrt (|ω_L·n_s| |ω_C·n_g| / (|ω_L·n_g| |ω_C·n_s|)).
Surface emitters seen by the camera: their position sample is connected too; emitters at
infinity seen by the camera: one camera ray per path index that escapes (a one-segment camera
path). The film's pixel weights are those of spp · W · H uniform film samples
(``launch.add_uniform_weights``), so the image converges to the path tracer's.

``max_depth`` counts segments of the whole path, camera connection included (2: direct
illumination), as Mitsuba's; ``rr_depth``; ``hide_emitters``. Surfaces only (participating media
are refused with one line). Variants rgb, mono and spectral: a light path carries the wavelengths drawn
first from its random stream (tirender/variants.py), its emitter's spectrum at them, and each splat goes
through the film's conversion (spectral: white light through a dispersive prism splits on the screen,
configs/prism_ptracer.yaml); its adjoints take the film's adjoint through the transposed conversion.

Gradients (``render_grad``, method ``prb``): detached path replay for light paths. The loss of one
path is Σ_k δ_k · c_k over its connections (δ_k: the adjoint image gathered through the filter at
the splat, divided by the uniform film weights). Pass 1 walks the path and sums A = Σ_k δ_k ∘ c_k;
pass 2 resets the RNG, walks the same path and scatters: Le with A / Le; each connection's adjoint
BSDF with δ_k ∘ β_k (its geometry factor); each non-Dirac sampled scattering with the part of A
still to come, R / f* (as PRB's L / f). Constant memory.

Attached gradients (scenes with height fields, whose triangles move with the ``<id>.height``
parameters; issue 16): a path's vertices move, so its splats move on the film. Reverse mode along
the path at constant memory: for j = n, n-1, ..., 1 the path is replayed from its seed to vertex j,
where (λo, λd) = ∂loss/∂(origin, direction) of the ray leaving vertex j (carried from vertex j+1)
gains vertex j's own connection (the film's adjoint w.r.t. the splat position, through the camera's
projection, and the importance and |cos θ_C| that change with the point: ``_connection_adjoint``),
goes through its scattering (Dirac reflection/refraction: ∂wo/∂(d, n); other lobes keep wo fixed in
world space) and its hit (walk/attached.py: the hit point and shading normal w.r.t. the arriving ray
and the triangle's vertices), and the moving triangle's share goes into the heights
(scene/heightfield.py). O(n²) ray casts per path, no per-vertex storage. Held fixed (documented
limits): the BSDF value's dependence on the moving frame (exact for diffuse receivers with n_s =
n_g), the Fresnel choice between reflection and refraction, occlusion and the film's border.
"""
import math

import taichi as ti

from .. import launch, variants
from ..bsdfs.base import SMOOTH
from ..bsdfs.registry import dispatch
from ..core import film
from ..core.interaction import make_interaction
from ..core.intersect import intersect, occluded
from ..core.math import BIG, max_component, safe_div, to_local, vec2, vec3
from ..core.rng import make_sampler
from ..emitters import registry as emitters
from ..emitters.base import DirectionSample, direction_record, env_record
from ..errors import ConfigError
from ..sensors.registry import aperture_sample, camera_connect, camera_connect_adjoint, camera_ray, check_connect
from ..variants import spec
from ..walk import attached, vertex
from . import path

NAMES = ("ptracer",)
MITSUBA_DEFAULTS = {"ptracer": {"max_depth": -1}}     # Mitsuba 3's ptracer.cpp (tirender's YAML default: 6)
VARIANTS = ("rgb", "mono", "spectral")
KEYS = path.WALK_KEYS
RR_MAX = path.RR_MAX


@ti.func
def _offset(st: ti.template(), p, n, d):
    """p moved off its surface (normal n) to the side of direction d."""
    eps = st.info_f[0] * (1.0 + ti.abs(p).max())
    sgn = 1.0 if n.dot(d) >= 0.0 else -1.0
    return p + n * (eps * sgn)


@ti.func
def _visible_env(st: ti.template(), em: ti.template(), cam, pix, sampler: ti.template(), grad: ti.template(), lam,
                 lw):
    """An emitter at infinity seen directly: a camera ray through a uniform film position that
    escapes splats its Le (the one-segment paths a light path cannot reach the camera with).
    grad: scatter δ(pos) into Le instead. lam, lw: the path's wavelengths and their weights."""
    w = st.cam_w[cam]
    pos = vec2(pix % w, pix // w) + sampler.next_2d()
    ap = aperture_sample(st, cam, sampler)
    e = st.info_i[1]
    if e >= 0:
        o, d, tmax = camera_ray(st, cam, pos, ap)
        if not occluded(st, o, d, tmax):
            q = env_record(e, o, d)
            if ti.static(grad):
                emitters.eval_adjoint(st, em, q, _adjoint(st, cam, pos, lam, lw), lam)
            else:
                _splat(st, cam, pos, emitters.eval(st, em, q, lam), lam, lw)


@ti.func
def _splat(st: ti.template(), cam, pos, c, lam, lw):
    """Splat the walk's colour c (at wavelengths lam) at film position pos, through the film's conversion."""
    film.splat_light(st, cam, pos, variants.to_rgb(film.nan_to_zero(c), lam, lw))


@ti.func
def _adjoint(st: ti.template(), cam, pos, lam, lw):
    """The adjoint of a splat at pos per lane of the walk's colour (the film's adjoint, converted)."""
    return variants.adjoint_from_rgb(film.gather_adjoint(st, cam, pos), lam, lw)


@ti.func
def _visible(st: ti.template(), cam, p, to_cam, dist):
    """The segment p -> the camera point (length dist) is unoccluded."""
    return not occluded(st, p, to_cam, dist * (1.0 - 1e-4))


PRIMAL, DETACHED, ATTACHED = 0, 1, 2     # light_path modes


@ti.func
def _connection_adjoint(st: ti.template(), cam, v, c, pos, to_cam, dist, imp, q):
    """∂/∂p (the vertex position) of the connection's loss <G(pos), c>: the splat moves with p
    (film.gather_adjoint_position chained through camera_connect_adjoint, through the camera point q) and its
    value scales with the camera's importance W(p) and |cos θ_C| = |n_g · to_cam| (f* |cos θ_L| / |cos θ_Lg| is held:
    exact for diffuse receivers with n_s = n_g)."""
    val = film.gather_adjoint(st, cam, pos).dot(c)
    dpos = film.gather_adjoint_position(st, cam, pos, c)
    g = camera_connect_adjoint(st, cam, v.p, q, dpos, safe_div(val, imp))
    cosc = to_cam.dot(v.ng)
    if ti.abs(cosc) > 0.0 and dist > 0.0:
        g += (val / cosc) * (-(v.ng - to_cam * cosc) / dist)
    return g


@ti.func
def light_path(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam, sampler: ti.template(), center,
               radius, max_depth, rr_depth, hide_emitters, grad: ti.template(), moving: ti.template(), mode, replay,
               A_in, stop, lam_o, lam_d, lam, lw):
    """Trace one light path (see the module doc); returns (A, vertices, λo, λd). grad (compile
    time): False for PRIMAL, True for the gradient modes (chosen at run time: one inlined walk);
    moving (compile time): whether ATTACHED is compiled in (scenes with height fields).

    PRIMAL: splat its camera connections. DETACHED (detached PRB for light paths): replay = 0
    returns A = Σ_k δ_k ∘ c_k over its connections c_k (δ_k: the adjoint gathered at each splat's
    film position); replay = 1 walks the same path again with A_in = A and scatters ∂/∂π: each
    connection's adjoint BSDF with weight δ_k ∘ β_k (geometry); each sampled (non-Dirac) scattering
    with the part of A still to come, R / f; the emitter's Le with A / Le. ATTACHED (paths that move
    with the geometry): walks to surface vertex `stop` (1: the first hit) and, given (λo, λd) = ∂loss
    /∂(origin, direction) of the ray leaving it (from the connections after it), returns those of the
    ray arriving at it, adding this vertex's own connection (its splat moves with the vertex) and
    scattering the moving triangle's share into the heights. `vertices`: the surface hits of the path.
    lam, lw: the path's wavelengths and their weights (spectral; tirender/variants.py)."""
    A = spec(0.0)
    R = A_in
    nv = 0
    lam_p = lam          # the wavelengths the path's lookups use (dispersion terminates the secondary lanes)
    stop_at = attached.Stop(valid=0)     # ATTACHED: the stop vertex and its adjoints
    u_sel = sampler.next_1d()
    u_pos = sampler.next_2d()
    u_dir = sampler.next_2d()
    e, o, d, n, uv, beta, pos_w = emitters.sample_ray(st, em, u_sel, u_pos, u_dir, center, radius, lam)
    if e >= 0 and max_component(beta) > 0.0:
        if ti.static(grad):
            if mode == DETACHED and replay == 1:   # the emitted light Le scales every connection of the path
                q = DirectionSample(p=o, n=n, d=-d, dist=1.0, uv=uv, emitter=e, scale=1.0, delta=0)
                emitters.eval_adjoint(st, em, q, safe_div(A_in, emitters.eval(st, em, q, lam)), lam)
        if pos_w > 0.0:
            u_cam = aperture_sample(st, cam, sampler)    # in every pass: the replays draw the same numbers
            if mode != ATTACHED:
                if hide_emitters == 0:   # the surface emitter's point seen by the camera (one segment)
                    cn = camera_connect(st, cam, o, u_cam)
                    pos, to_cam, dist, imp = cn.pos, cn.to_cam, cn.dist, cn.imp
                    if cn.valid == 1:
                        so = _offset(st, o, n, to_cam)
                        if _visible(st, cam, so, to_cam, (cn.q - so).norm()):
                            q = direction_record(e, o, n, uv, -to_cam, dist)
                            k = ti.abs(n.dot(to_cam)) * imp * pos_w
                            if ti.static(grad):
                                if mode == DETACHED and replay == 1:
                                    emitters.eval_adjoint(st, em, q, _adjoint(st, cam, pos, lam, lw) * k, lam)
                            else:
                                _splat(st, cam, pos, emitters.eval(st, em, q, lam) * k, lam, lw)
            o = _offset(st, o, n, d)
        depth = 1          # segments from the emitter to the next vertex
        active = True
        while active:
            tri, t, b1, b2, inst = intersect(st, o, d, BIG)
            si = make_interaction(st, tri, t, b1, b2, o, d, inst)
            if si.valid == 0:
                active = False
            else:
                nv = depth
                at_stop = ti.static(moving) and mode == ATTACHED and depth == stop
                g_p = lam_o         # ATTACHED: the next ray's origin is this vertex
                v = vertex.surface_vertex(st, si, d, lam_p)            # v.wi: towards the light (local)
                u_cam = aperture_sample(st, cam, sampler)     # at every vertex, in every pass (thin lens)
                cos_lg = ti.abs(d.dot(v.ng))
                if (v.flags & SMOOTH) != 0 and depth + 1 <= max_depth and cos_lg > 0.0 and \
                        (mode != ATTACHED or at_stop):
                    cn = camera_connect(st, cam, v.p, u_cam)
                    pos, to_cam, dist, imp = cn.pos, cn.to_cam, cn.dist, cn.imp
                    if cn.valid == 1:
                        wc = to_local(v.s, v.t, v.n, to_cam)
                        f, _pdf = bsdf.eval_pdf(st, v.ctx, wc, v.wi)   # f(ω_C, ω_L) |cos θ_L| = f* |cos θ_L|
                        # f* |ω_C·n_s| with pbrt's shading-normal correction = f* |ω_L·n_s| |ω_C·n_g| / |ω_L·n_g|
                        geo = ti.abs(to_cam.dot(v.ng)) / cos_lg * imp
                        so = vertex.spawn(st, v, to_cam)
                        if max_component(f) > 0.0 and _visible(st, cam, so, to_cam, (cn.q - so).norm()):
                            c = film.nan_to_zero(beta * f * geo)
                            if ti.static(grad):
                                if mode == DETACHED:
                                    dk = _adjoint(st, cam, pos, lam, lw)
                                    if replay == 0:
                                        A += dk * c
                                    else:
                                        bsdf.adjoint(st, v.ctx, wc, v.wi, dk * beta * geo)
                                        R -= dk * c
                                elif ti.static(moving):
                                    if at_stop:
                                        g_p += _connection_adjoint(st, cam, v, variants.to_rgb(c, lam, lw), pos,
                                                                   to_cam, dist, imp, cn.q)
                            else:
                                _splat(st, cam, pos, c, lam, lw)
                if depth + 1 >= max_depth:
                    active = False
                    if ti.static(moving):
                        if at_stop:
                            stop_at = attached.Stop(valid=1, tri=tri, inst=inst, t=t, b=vec2(b1, b2), o=o, d=d, g_p=g_p)
                else:
                    bs = vertex.sample(st, bsdf, v, sampler)
                    if ti.static(moving):
                        if at_stop:
                            g_d, g_nd, _g_r = attached.scatter_adjoint(v, attached.lobe_normal(st, bsdf, v), d, bs, lam_d)
                            g_n, g_uv = attached.lobe_normal_adjoint(st, bsdf, v, attached.frame_tri(st, tri, inst),
                                                                     g_nd)
                            stop_at = attached.Stop(valid=1, tri=tri, inst=inst, t=t, b=vec2(b1, b2), o=o, d=d, g_p=g_p,
                                                    g_n=g_n, g_uv=g_uv, g_d=g_d)
                            active = False
                    wo = to_local(v.s, v.t, v.n, bs.wo)
                    cos_os = ti.abs(wo[2])
                    cos_ls = ti.abs(v.wi[2])
                    if not active:
                        pass
                    elif bs.valid == 0 or max_component(bs.weight) <= 0.0 or cos_os <= 0.0:
                        active = False
                    else:
                        if ti.static(grad):
                            if mode == DETACHED and replay == 1 and bs.delta == 0:
                                # the connections still to come scale with the adjoint BSDF sampled here,
                                # f*(ω_L -> ω_o) = f(ω_o, ω_L): R ∂ln f* (its value: f(ω_o, ω_L) |cos θ_L|)
                                fs, _p = bsdf.eval_pdf(st, v.ctx, wo, v.wi)
                                bsdf.adjoint(st, v.ctx, wo, v.wi, R * safe_div(spec(1.0), fs))
                        # importance: no radiance compression at refraction (× η²); shading normals
                        corr = cos_ls * ti.abs(bs.wo.dot(v.ng)) / (cos_lg * cos_os)
                        beta *= bs.weight * (bs.eta * bs.eta * corr)
                        if bs.disperse == 1:         # secondary lanes ended (splats keep the camera's conversion)
                            lam_p = variants.terminate_secondary(lam_p)
                        o = vertex.spawn(st, v, bs.wo)
                        d = bs.wo
                        depth += 1
                        u_rr = sampler.next_1d()
                        bmax = max_component(beta)
                        if not bmax > 0.0:
                            active = False
                        elif depth >= rr_depth:
                            q_rr = ti.min(bmax, RR_MAX)
                            if u_rr >= q_rr:
                                active = False
                            else:
                                beta /= q_rr
    lo_out = vec3(0.0)
    ld_out = vec3(0.0)
    if ti.static(moving):
        lo_out, ld_out = attached.stop_adjoint(st, stop_at)
    return A, nv, lo_out, ld_out


_kernels = {}


def _kernel(grad, attached=False):
    """The primal (splat) or gradient megakernel: detached PRB (two passes per path) and, with
    `attached` (scenes whose geometry moves: height fields), the attached pass — constant memory:
    for j = vertices, ..., 1 the path is replayed from its seed to vertex j and (λo, λd) carried one
    vertex back (O(vertices²) ray casts per path, no per-vertex storage)."""
    key = (grad, attached)
    if key not in _kernels:
        @ti.kernel
        def trace(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
                  sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32,
                  center: ti.types.vector(3, float), radius: float):
            npix = st.cam_w[cam] * st.cam_h[cam]
            for i in range(npix * spp):
                pix = i % npix
                index = sample_offset + i // npix
                sampler = make_sampler(seed, pix, index)
                lam, lw = variants.sample_wavelengths(sampler)       # the path's wavelengths (spectral)
                if hide_emitters == 0:
                    _visible_env(st, em, cam, pix, sampler, grad, lam, lw)
                z = vec3(0.0)
                if ti.static(grad):
                    # pass 0: the connections' adjoint sum A (and the path's vertices); pass 1: the RNG
                    # reset, the same path replayed, detached scatter; passes 2, ...: attached, vertex
                    # nv, nv - 1, ..., 1 (scenes with moving geometry). One inlined walk, run per pass.
                    saved = sampler.copy()
                    A = spec(0.0)
                    nv = 0
                    lam_o = vec3(0.0)
                    lam_d = vec3(0.0)
                    n_pass = 1
                    p = 0
                    while p < n_pass:
                        s = saved.copy()
                        mode = DETACHED if p < 2 else ATTACHED
                        A_p, nv_p, lo_p, ld_p = light_path(st, bsdf, em, cam, s, center, radius, max_depth, rr_depth,
                                                           hide_emitters, True, attached, mode, p, A, nv - (p - 2),
                                                           lam_o, lam_d, lam, lw)
                        if p == 0:
                            A = A_p
                            nv = nv_p
                            n_pass = 2 + (nv if ti.static(attached) else 0)
                            if not (max_component(ti.abs(A)) > 0.0 and A.sum() == A.sum()):
                                p += 1        # nothing to scatter detached
                        elif p >= 2:
                            lam_o = lo_p
                            lam_d = ld_p
                        p += 1
                else:
                    light_path(st, bsdf, em, cam, sampler, center, radius, max_depth, rr_depth, hide_emitters,
                               False, False, PRIMAL, 0, spec(0.0), 0, z, z, lam, lw)
        _kernels[key] = trace
    return _kernels[key]


def _sphere(scene):
    """Kernel arguments (centre, radius) of the disk that emitters at infinity start their rays on:
    the scene's bounding sphere, a little enlarged (no grazing misses)."""
    center, radius = scene.bounding_sphere
    return ti.Vector(center), float(radius) * 1.001


def _check(scene, sensor):
    check_connect(scene, sensor, "the light tracer (ptracer)")
    if scene.desc.media:
        raise ConfigError("the light tracer renders surfaces only; this scene has participating media "
                          "(use volpath)", key="integrator.type")


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
    """Trace spp · W · H light paths (indices sample_offset, ... per pixel index) into the film of
    `sensor` (cleared first unless clear=False) and return the image."""
    _check(scene, sensor)
    a = path.args(scene, integrator)
    st = launch.begin_film(scene, sensor, clear)
    bsdf = dispatch(scene.bsdf_levels)
    s = scene.sensors[sensor]
    npix = s.width * s.height
    sphere = _sphere(scene)
    seed = int(seed) & 0xFFFFFFFF
    kernel = _kernel(False)
    footprint = (2 * math.ceil(s.radius) + 1) ** 2
    # a launch of k samples per pixel adds at most (k·npix paths) · (max_depth connections + the
    # visible emitters) · footprint values into one pixel
    depth = min(a.max_depth, 64) + 2
    launch.sweep(scene, sensor, spp, "ptracer", progress,
                 lambda off, k: kernel(st, bsdf, scene.em_mask, sensor, k, sample_offset + off, seed, a.max_depth,
                                       a.rr_depth, a.hide, *sphere),
                 film="splat", film_adds=lambda k: k * npix * depth * footprint)
    launch.add_uniform_weights(st, s, spp * npix)
    return launch.resolve_film(st, s)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> (the light tracer's image) w.r.t. every parameter
    by detached PRB for light paths (dict name -> array): δy / W_p with W_p the uniform film
    samples' weights (the light tracer's own), spp · W · H light paths, each walked twice."""
    _check(scene, sensor)
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    scene.bind()                      # height fields displaced: the bounding sphere is current
    sphere = _sphere(scene)
    kernel = _kernel(True, bool(scene.heightfield_params))

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide, *sphere)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run,
                                weights=lambda s, n: launch.uniform_weight_sums(s, n * s.width * s.height))


INTEGRATES = NAMES
METHODS = {"prb": render_grad}
