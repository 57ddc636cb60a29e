"""The per-pixel megakernels every integrator shares, generated once per sample function.

An integrator's ``sample`` has the signature
    sample(st, bsdf, em, opts, mode, o, d, tmax, lam, sampler, max_depth, rr_depth, hide_emitters, L_in, dL, replay) -> L
(``o, d, tmax``: the camera ray and its maxt — the far clip plane, tirender/sensors —; ``lam``: the path's
wavelengths, drawn here first from the sample's random stream in the spectral variant; the kernels convert the walk's colour to the film's RGB and the film's adjoint to the walk's lanes through
tirender/variants.py, so integrators never see the variant's film conversion.)
(``opts``: its compile-time options, e.g. volpath's free-flight estimator; ``mode``: PRIMAL or
PRB with the runtime pass ``replay``, see tirender/walk/state.py). From it:

    render_kernel(sample)   primal: one thread per pixel (CPU: per tile of pixels), its samples' filter
                            footprints gathered in a local accumulator and flushed into st.film (fixed point)
    moment_kernel(sample)   the same samples (same seed: same random numbers), each splatting its colour in XYZ
                            squared per channel: the film resolves to the per-pixel second moment (Mitsuba's
                            ``moment`` integrator's m2 channels; integrators/moment.py)
    replay_kernel(sample)   detached PRB (Vicini et al. 2021): one thread per pixel, per sample
                            δL = Σ_p w_p δy_p / W_p, the primal walk -> L, then the RNG reset and
                            the replay that back-propagates δL (constant memory) — both passes
                            through one inlined walk (mode PRB, see walk/state.py)
    tangent_kernel(sample)  forward mode (tirender/forward.py): per sample the primal walk -> L, then
                            three replays with δL = e_c whose adjoint adds go to the thread's tangent
                            accumulator (core/pool.Tangent: <∂L_c/∂π, v>); the tangent (t_r, t_g, t_b)
                            is splatted like radiance, so the film resolves to the image's J v.
                            In spectral_polarized (no replay: Mueller products are not invertible) one
                            walk in FORWARD mode propagates the tangents instead (walk/state.py).
All are cached per sample function, so each compiles once per specialisation.
"""
import taichi as ti

from .. import backend, variants
from ..core import film, pool
from ..sensors.registry import camera_ray, camera_sample
from ..spectra import cie
from ..variants import spec
from ..walk.state import FORWARD, PRB, PRIMAL

_M = cie.SRGB_TO_XYZ.tolist()


@ti.func
def _squared_xyz(rgb):
    """Per channel, the square of the sample's colour in XYZ (Mitsuba's moment integrator; mono: Y in every
    channel, as its Color3f of the luminance)."""
    xyz = rgb
    if ti.static(not variants.mono()):
        xyz = ti.Vector([_M[i][0] * rgb[0] + _M[i][1] * rgb[1] + _M[i][2] * rgb[2] for i in ti.static(range(3))])
    return xyz * xyz


_kernels = {}


def render_kernel(sample, wide=False):
    """wide: a Gaussian filter wider than the pixel-local block (core/film.py), compile-time."""
    return _kernel(sample, "render", bool(wide))


def moment_kernel(sample, wide=False):
    return _kernel(sample, "moment", bool(wide))


def replay_kernel(sample):
    return _kernel(sample, "replay", False)


def tangent_kernel(sample, wide=False):
    """Call it with a core/pool.Tangent view as st (CPU and CUDA: per-thread accumulators)."""
    return _kernel(sample, "tangent", bool(wide))


def _kernel(sample, kind, wide):
    """kind: "render", "replay" or "tangent" (compile-time). On the CPU the kernels that flush a film (not replay,
    not a wide filter) run a thread per tile of film.TILE² pixels, its samples summed in the tile's block and
    flushed once, in four launches (tiles (tx, ty) by the parity of tx and ty): the tiles of one launch are TILE
    pixels apart, so their flushes never meet and add without atomics (the film is fixed point: the same sums in
    any order, core/film.py). A phase of few tiles splits each tile's samples into items (tile_chunks), one thread
    each, whose flushes then add atomically."""
    tiled = _on_cpu() and kind != "replay" and not wide
    if (sample, kind, wide, tiled) not in _kernels:
        @ti.func
        def pixel(st: ti.template(), bsdf: ti.template(), em: ti.template(), opts: ti.template(), cam, spp,
                  sample_offset, seed, max_depth, rr_depth, hide_emitters, w, pix, acc: ti.template()):
            """The samples of pixel pix, splatted into the local accumulator acc (its block or its tile's)."""
            for k in range(spp):
                sampler, pos, ap = camera_sample(st, cam, pix, seed, sample_offset + k)
                lam, lw = variants.sample_wavelengths(sampler)
                o, d, tmax = camera_ray(st, cam, pos, ap)
                if ti.static(kind == "tangent" and variants.polarized()):
                    tan = sample(st, bsdf, em, opts, FORWARD, o, d, tmax, lam, sampler, max_depth, rr_depth,
                                 hide_emitters, spec(0.0), spec(0.0), 0)
                    tan_rgb = variants.to_rgb(tan, lam, lw)
                    film.local_splat(st, cam, pix % w, pix // w, pos, film.nan_to_zero(tan_rgb), acc, False, wide)
                elif ti.static(kind == "tangent"):
                    # pass 0: the primal walk -> L; pass 1 + c: the same path replayed with δL = e_c (lane c),
                    # its tangent read from the pool. A runtime loop around one call: one inlined walk body
                    # (the bulk of the kernel's compile) serves every pass
                    L = spec(0.0)
                    tan = spec(0.0)
                    for p in range(ti.static(variants.lanes() + 1)):
                        dL = spec(1.0)
                        if p > 0:
                            dL = ti.Vector([ti.select(p - 1 == i, 1.0, 0.0)
                                            for i in ti.static(range(variants.lanes()))], float)
                            pool.tangent_reset(st)
                        sampler_r, _pos_r, _ap_r = camera_sample(st, cam, pix, seed, sample_offset + k)
                        variants.sample_wavelengths(sampler_r)
                        Lp = sample(st, bsdf, em, opts, PRB, o, d, tmax, lam, sampler_r, max_depth, rr_depth,
                                    hide_emitters, L, dL, ti.min(p, 1))
                        if p == 0:
                            L = Lp
                            if not (L.sum() == L.sum()):     # a NaN lane: no tangent
                                break
                        else:
                            tan += dL * pool.tangent_value(st)
                    tan_rgb = variants.to_rgb(tan, lam, lw)     # J v of the lanes -> of the film's RGB
                    film.local_splat(st, cam, pix % w, pix // w, pos, film.nan_to_zero(tan_rgb), acc, False, wide)
                elif ti.static(kind == "replay"):
                    dL = variants.adjoint_from_rgb(film.gather_adjoint(st, cam, pos), lam, lw)
                    if dL.max() != 0.0 or dL.min() != 0.0:
                        # pass 2: the primal walk -> L; pass 3: the RNG reset, the same path replayed,
                        # δL back-propagated (one walk body, mode PRB, runs both passes)
                        L = spec(0.0)
                        for replay in range(2):
                            sampler_p, _pos_p, _ap_p = camera_sample(st, cam, pix, seed, sample_offset + k)
                            variants.sample_wavelengths(sampler_p)
                            L = sample(st, bsdf, em, opts, PRB, o, d, tmax, lam, sampler_p, max_depth, rr_depth,
                                       hide_emitters, L, dL, replay)
                            if not (L.sum() == L.sum()):
                                break
                else:
                    L = sample(st, bsdf, em, opts, PRIMAL, o, d, tmax, lam, sampler, max_depth, rr_depth, hide_emitters,
                               spec(0.0), spec(0.0), 0)
                    rgb = variants.to_rgb(film.nan_to_zero(L), lam, lw)
                    if ti.static(kind == "moment"):
                        rgb = _squared_xyz(rgb)
                    film.local_splat(st, cam, pix % w, pix // w, pos, rgb, acc, False, wide)

        @ti.kernel
        def pixels(st: ti.template(), bsdf: ti.template(), em: ti.template(), opts: ti.template(), cam: ti.i32,
                   spp: ti.i32, sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32,
                   hide_emitters: ti.i32, phase: ti.i32, spread: ti.i32, chunks: ti.i32):
            w = st.cam_w[cam]
            h = st.cam_h[cam]
            if ti.static(tiled):
                nx, ny = film.tiles(w, h, phase)
                per = (spp + chunks - 1) // chunks
                # a thread per (tile, chunk of its samples) (spread: enough blocks to balance)
                for tt in range(nx * ny * chunks * spread):
                    if tt % spread == 0:
                        t = tt // spread % (nx * ny)
                        k0 = tt // spread // (nx * ny) * per
                        x0 = (2 * (t % nx) + phase % 2) * film.TILE
                        y0 = (2 * (t // nx) + phase // 2) * film.TILE
                        acc = film.local_zero(st, cam, x0, y0, True)     # the tile's block, flushed once per item
                        for y in range(y0, ti.min(y0 + film.TILE, h)):
                            for x in range(x0, ti.min(x0 + film.TILE, w)):
                                pixel(st, bsdf, em, opts, cam, ti.min(per, spp - k0), sample_offset + k0, seed,
                                      max_depth, rr_depth, hide_emitters, w, y * w + x, acc)
                        film.local_flush(st, cam, acc, False, True, chunks > 1)
            else:
                for pix in range(w * h):
                    acc = film.local_zero(st, cam, pix % w, pix // w)
                    pixel(st, bsdf, em, opts, cam, spp, sample_offset, seed, max_depth, rr_depth, hide_emitters, w,
                          pix, acc)
                    if ti.static(kind != "replay"):
                        film.local_flush(st, cam, acc, False)

        _kernels[sample, kind, wide, tiled] = _Launch(pixels, tiled)
    return _kernels[sample, kind, wide, tiled]


def _on_cpu():
    return backend.current_arch() == "cpu"


class _Launch:
    """A pixels kernel called as before (st, bsdf, em, opts, cam, spp, ...): once over the pixels, or on the CPU
    once per tile phase (film.tiles: the tiles of one phase are TILE pixels apart, their flushes add without
    atomics), each phase's work items spread over at least BLOCKS of the CPU scheduler's blocks so that the
    threads finish a phase together. A phase of few tiles (a small film) splits each tile's samples into
    ``chunks`` items (``tile_chunks``), whose flushes add with atomics."""
    BLOCKS = 256

    def __init__(self, kernel, tiled):
        self.kernel, self.tiled = kernel, tiled

    def __call__(self, st, *args):
        if not self.tiled:
            self.kernel(st, *args, 0, 1, 1)
            return
        w, h = int(st.cam_w[args[3]]), int(st.cam_h[args[3]])
        for phase in range(4):
            nx, ny = film.tiles(w, h, phase)
            c = tile_chunks(nx * ny, int(args[4]))
            n = max(nx * ny * c, 1)
            self.kernel(st, *args, phase, max(backend.spread(n), -(-self.BLOCKS * backend.CPU_BLOCK // n)), c)


ITEMS = 256          # work items per tile phase that tile_chunks aims at (not per thread: the image is the same
#                      on every machine)
MIN_CHUNK_SPP = 8    # samples per pixel of one item at the least (its flush: a tile block of atomic adds)


def tile_chunks(tiles, spp):
    """Items per tile of a phase of `tiles` tiles at spp samples per pixel: enough for ITEMS items in the phase,
    each of at least MIN_CHUNK_SPP samples per pixel. A phase's work is its tiles' samples, and tiles cost
    what their paths cost: a 48 x 48 film has 36 tiles per phase, a few of them over an expensive object, and a
    thread per tile left the other threads waiting (Mitsuba's participating-media test scene at 868 spp: 1.5 of
    2 cores busy). A function of the film and spp alone: the same image on every machine (the film's
    fixed-point sums do not depend on the order of the adds; each item's samples are summed in the float block
    before they become fixed point, so images at chunks 1 and 2 differ in their last bits)."""
    return int(max(1, min(-(-ITEMS // max(tiles, 1)), spp // MIN_CHUNK_SPP)))
