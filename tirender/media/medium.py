"""The medium interface used by the volume integrators: coefficients at a point (and their
adjoint), bbox clipping, and the majorants of grid media (recomputed on the device before
every render, since an optimiser changes the density in place).

sigma_t(x) = scale * sigma(x) (the ``sigma_t`` volume of a homogeneous medium, the ``density``
volume of a grid medium, 1 or 3 channels), albedo(x) from the ``albedo`` volume; both RGB, read as the walk's
colour at the path's wavelengths ``lam`` (tirender/variants.py: as RGB, their luminance in mono, in the
spectral variants flat spectra for 1 channel and upsampled spectra for 3: σ unbounded, a constant albedo a
reflectance, 3-channel grids voxel by voxel as Mitsuba's gridvolume; a sampled spectrum (textures.py) at the path's wavelengths). Their adjoints take the lanes'
derivatives back to the stored values.
"""
import taichi as ti

from .. import variants
from ..core.math import vec3
from ..textures import CLAMP, TEX_VOLUME, is_spectrum, spectrum_eval, spectrum_eval_adjoint
from . import GRID_MAJORANT_MARGIN, HOMOGENEOUS, MAJORANT_GRID
from .grid import (clip_bbox, const_eval, const_eval_adjoint, volume_eval, volume_eval_adjoint, volume_local,
                   volume_spectrum)

__all__ = ["clip_bbox", "coefficients", "coefficients_adjoint", "homogeneous_coefficients",
           "homogeneous_coefficients_adjoint", "is_homogeneous", "default_step", "sigma_t_adjoint",
           "update_majorants"]


@ti.func
def _colour(st: ti.template(), tid, rgb, lam, bounded: ti.template()):
    """A medium volume's value as the walk's colour at wavelengths lam: RGB as stored (rgb); Y (mono); in the
    spectral variants a 1-channel volume is a flat spectrum (exactly its value) and a 3-channel one upsampled —
    an albedo (bounded) as a reflectance, a σ as an unbounded spectrum k S(c(rgb/k), λ), k = 2 max(rgb), which
    can reach 2 max(rgb) (update_majorants bounds it)."""
    out = variants.spec(0.0)
    lift = True                     # mono: always (Y); spectral: 3-channel volumes only
    sampled = False                 # spectral: a sampled spectrum (textures.spectrum_eval)
    if ti.static(variants.spectral()):
        sampled = is_spectrum(st, tid)
        lift = tid >= 0 and st.tex_c[tid] == 3
    if ti.static(variants.spectral() or variants.mono()):
        if sampled:
            out = spectrum_eval(st, tid, lam)
        elif lift:
            if ti.static(bounded):
                out = variants.reflectance(rgb, lam)
            else:
                out = variants.unbounded(rgb, lam)
        else:
            out = variants.spec(rgb[0])
    else:
        out = rgb
    return out


@ti.func
def _colour_adjoint(st: ti.template(), tid, rgb, lam, d, bounded: ti.template()):
    """∂<d, _colour(rgb, λ)>/∂rgb (vec3; a 1-channel volume's adjoint sums the components: grid_eval_adjoint)."""
    g = vec3(0.0)
    lift = True
    if ti.static(variants.spectral()):
        lift = tid >= 0 and st.tex_c[tid] == 3
    if ti.static(variants.spectral() or variants.mono()):
        if lift:
            if ti.static(bounded):
                g = variants.reflectance_adjoint(rgb, lam, d)
            else:
                g = variants.unbounded_adjoint(rgb, lam, d)
        else:
            g = vec3(d.sum(), 0.0, 0.0)
    else:
        g = d
    return g


@ti.func
def _per_voxel(st: ti.template(), tid):
    """Whether σ volume tid is lifted voxel by voxel (spectral variants: a 3-channel grid, Mitsuba's gridvolume,
    grid.volume_spectrum)."""
    res = False
    if ti.static(variants.spectral()):
        if tid >= 0:
            res = st.tex_c[tid] == 3 and (st.tex_flags[tid] & TEX_VOLUME) != 0
    return res


@ti.func
def _volume_colour(st: ti.template(), tid, p, lam, bounded: ti.template()):
    """Volume tid at p as the walk's colour: in the spectral variants a 3-channel grid voxel by voxel (Mitsuba's
    gridvolume lifts every 3-channel grid so, σ or albedo: k S(c(rgb/k)), k = 2 max(rgb), an albedo grid can
    exceed 1 as in Mitsuba); otherwise _colour of the interpolated value (bounded: a reflectance)."""
    out = variants.spec(0.0)
    if ti.static(variants.spectral()):
        if is_spectrum(st, tid):
            out = spectrum_eval(st, tid, lam)
        elif _per_voxel(st, tid):
            out = volume_spectrum(st, tid, p, lam, variants.spec(0.0), False)
        else:
            out = _colour(st, tid, volume_eval(st, tid, p), lam, bounded)
    else:
        out = _colour(st, tid, volume_eval(st, tid, p), lam, bounded)
    return out


@ti.func
def coefficients(st: ti.template(), m, p, lam):
    """(sigma_t, albedo) of medium m at world position p, as the walk's colour at wavelengths lam (each volume
    looked up through its own world -> local map, grid.volume_local; in the spectral variants 3-channel grids
    voxel by voxel as Mitsuba's gridvolume, a constant albedo a reflectance)."""
    ts = st.med_sigma[m]
    ta = st.med_albedo[m]
    return _volume_colour(st, ts, p, lam, False) * st.med_scale[m], _volume_colour(st, ta, p, lam, True)


@ti.func
def coefficients_adjoint(st: ti.template(), m, p, lam, d_sigma_t, d_albedo):
    """Scatter d(objective)/d sigma_t and d/d albedo (per lane) at p into the medium's volumes."""
    sigma_t_adjoint(st, m, p, lam, d_sigma_t)
    ta = st.med_albedo[m]
    if variants.nonzero(d_albedo):
        if _sampled(st, ta):
            spectrum_eval_adjoint(st, ta, lam, d_albedo)
        elif _per_voxel(st, ta):
            volume_spectrum(st, ta, p, lam, d_albedo, True)
        else:
            rgb = vec3(0.0)
            if ti.static(not variants.rgb()):
                rgb = volume_eval(st, ta, p)
            volume_eval_adjoint(st, ta, p, _colour_adjoint(st, ta, rgb, lam, d_albedo, True))


@ti.func
def sigma_t_adjoint(st: ti.template(), m, p, lam, d_sigma_t):
    """Scatter d(objective)/d sigma_t (per lane) at p into the medium's sigma_t / density volume only."""
    if variants.nonzero(d_sigma_t):
        ts = st.med_sigma[m]
        if ti.static(variants.spectral()):
            if is_spectrum(st, ts):
                spectrum_eval_adjoint(st, ts, lam, d_sigma_t * st.med_scale[m])
            elif _per_voxel(st, ts):
                volume_spectrum(st, ts, p, lam, d_sigma_t * st.med_scale[m], True)
            else:
                _sigma_adjoint(st, ts, p, lam, d_sigma_t * st.med_scale[m])
        else:
            _sigma_adjoint(st, ts, p, lam, d_sigma_t * st.med_scale[m])


@ti.func
def _sigma_adjoint(st: ti.template(), ts, p, lam, d):
    """Adjoint of _colour(volume_eval(ts, p)) (a σ volume lifted after interpolating)."""
    rgb = vec3(0.0)
    if ti.static(not variants.rgb()):
        rgb = volume_eval(st, ts, p)
    volume_eval_adjoint(st, ts, p, _colour_adjoint(st, ts, rgb, lam, d, False))


@ti.func
def homogeneous_coefficients(st: ti.template(), m, lam):
    """(sigma_t, albedo) of a homogeneous medium (1x1x1 volumes: no lookup code) at wavelengths lam."""
    ts = st.med_sigma[m]
    ta = st.med_albedo[m]
    return _colour(st, ts, const_eval(st, ts), lam, False) * st.med_scale[m], _colour(st, ta, const_eval(st, ta), lam, True)


@ti.func
def _sampled(st: ti.template(), tid):
    """Whether volume tid is a sampled spectrum (spectral variants only; compile-time False elsewhere)."""
    res = False
    if ti.static(variants.spectral()):
        res = is_spectrum(st, tid)
    return res


@ti.func
def _const_adjoint(st: ti.template(), tid, lam, d, bounded: ti.template()):
    """Scatter ∂<d, _colour(const volume tid)>/∂ into it (a sampled spectrum: into its values)."""
    if _sampled(st, tid):
        spectrum_eval_adjoint(st, tid, lam, d)
    else:
        const_eval_adjoint(st, tid, _colour_adjoint(st, tid, const_eval(st, tid), lam, d, bounded))


@ti.func
def homogeneous_coefficients_adjoint(st: ti.template(), m, lam, d_sigma_t, d_albedo):
    _const_adjoint(st, st.med_sigma[m], lam, d_sigma_t * st.med_scale[m], False)
    _const_adjoint(st, st.med_albedo[m], lam, d_albedo, True)


@ti.func
def is_homogeneous(st: ti.template(), m):
    return st.med_flags[m] & HOMOGENEOUS


@ti.func
def default_step(st: ti.template(), m):
    """Ray-marching step of a grid medium: half the smallest voxel extent."""
    tid = st.med_sigma[m]
    ext = st.med_bmax[m] - st.med_bmin[m]
    res = vec3(st.tex_w[tid], st.tex_h[tid], st.tex_d[tid])
    v = ext / res
    return 0.5 * ti.min(v[0], ti.min(v[1], v[2]))


# ------------------------------------------------------------------------------- majorants
@ti.func
def _voxel_range(lo, hi, n, mode, bilinear):
    """Voxels (i0, i1) along one axis that a lookup reads anywhere in the local interval [lo, hi] (n voxels,
    centres at (i + 0.5) / n; textures.texel_axis): clamped ranges clamp, a repeated or mirrored range that
    leaves [0, n) is the whole axis. The interval is widened by 1e-5 against rounding."""
    a = lo * n - 1e-5
    b = hi * n + 1e-5
    if bilinear:
        a -= 0.5
        b -= 0.5
    i0 = ti.cast(ti.floor(ti.max(a, -1.0e9)), ti.i32)
    i1 = ti.cast(ti.floor(ti.min(b, 1.0e9)), ti.i32)
    if bilinear:
        i1 += 1
    if mode == CLAMP:
        i0 = ti.min(ti.max(i0, 0), n - 1)
        i1 = ti.min(ti.max(i1, 0), n - 1)
    elif i0 < 0 or i1 > n - 1:
        i0 = 0
        i1 = n - 1
    return i0, i1


@ti.kernel
def _cell_majorants(st: ti.template(), m: ti.i32, margin: float):
    """st.med_majgrid[m, cell] = max(fixed majorant, margin * scale * max of the density voxels that
    the lookup reads anywhere in the cell) for each cell of the MAJORANT_GRID^3 grid over the medium's bbox
    (the cell's box mapped to the volume's local coordinates: the bounding box of its image under
    grid.volume_local, exact for an affine map)."""
    r = ti.static(MAJORANT_GRID)
    tid = st.med_sigma[m]
    base = st.tex_offset[tid]
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    d = st.tex_d[tid]
    c = st.tex_c[tid]
    mode = st.tex_wrap[tid]
    lin = st.tex_bilinear[tid] == 1
    M = st.tex_vol[tid]
    A = ti.Matrix([[M[i, j] for j in ti.static(range(3))] for i in ti.static(range(3))])
    bmin = st.med_bmin[m]
    cell_ext = (st.med_bmax[m] - bmin) / r
    half = 0.5 * (ti.abs(A) @ cell_ext)
    for cell in range(r * r * r):
        centre = bmin + (vec3(cell % r, (cell // r) % r, cell // (r * r)) + 0.5) * cell_ext
        u = volume_local(st, tid, centre)
        x0, x1 = _voxel_range(u[0] - half[0], u[0] + half[0], w, mode, lin)
        y0, y1 = _voxel_range(u[1] - half[1], u[1] + half[1], h, mode, lin)
        z0, z1 = _voxel_range(u[2] - half[2], u[2] + half[2], d, mode, lin)
        mx = 0.0
        for z in range(z0, z1 + 1):
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    for k in range(c):
                        mx = ti.max(mx, st.pool[base + ((z * h + y) * w + x) * c + k])
        st.med_majgrid[m, cell] = ti.max(st.med_fixed_majorant[m], margin * mx * st.med_scale[m])


def update_majorants(scene, st):
    """st.med_majgrid[m, cell]: for each grid medium m, an upper bound of sigma_t on each cell of a
    MAJORANT_GRID^3 grid over its bbox, max(fixed majorant, GRID_MAJORANT_MARGIN * the largest
    scale * density its trilinear lookups read) — what delta and ratio tracking use (homogeneous
    media sample analytically and need none). Runs on the device before every render (the pool may
    have changed there); ``media.spec.host_majorant`` is the global bound, for checks."""
    for m, med in enumerate(scene.desc.media):
        if not med.flags & HOMOGENEOUS:
            # spectral variants: a 3-channel density's upsampled spectrum reaches up to 2 max(rgb) (_colour)
            chromatic = variants.spectral() and scene.desc.textures[med.sigma].data.shape[-1] == 3
            _cell_majorants(st, m, GRID_MAJORANT_MARGIN * (2.0 if chromatic else 1.0))
