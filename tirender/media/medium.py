"""The medium interface used by the volume integrators: coefficients at a point (and their
adjoint), bbox clipping, and the majorants of grid media (recomputed on the device before
every render, since an optimiser changes the density in place).

sigma_t(x) = scale * sigma(x) (the ``sigma_t`` volume of a homogeneous medium, the ``density``
volume of a grid medium, 1 or 3 channels), albedo(x) from the ``albedo`` volume; both RGB, read as the walk's
colour at the path's wavelengths ``lam`` (tirender/variants.py: as RGB, their luminance in mono, in the
spectral variants flat spectra for 1 channel and upsampled spectra for 3: σ unbounded, the albedo a
reflectance; a sampled spectrum (textures.py) at the path's wavelengths). Their adjoints take the lanes'
derivatives back to the stored values.
"""
import taichi as ti

from .. import variants
from ..core.math import vec3
from ..textures import is_spectrum, spectrum_eval, spectrum_eval_adjoint
from . import GRID_MAJORANT_MARGIN, HOMOGENEOUS, MAJORANT_GRID
from .grid import clip_bbox, const_eval, const_eval_adjoint, grid_eval, grid_eval_adjoint, to_local

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
def _scatter(st: ti.template(), tid, u, lam, d, bounded: ti.template(), const: ti.template()):
    """Scatter ∂<d, _colour(volume tid at u, λ)>/∂ into the volume (a sampled spectrum: into its values; const:
    a 1x1x1 volume, no lookup code)."""
    sampled = False
    if ti.static(variants.spectral()):
        sampled = is_spectrum(st, tid)
        if sampled:
            spectrum_eval_adjoint(st, tid, lam, d)
    if not sampled:
        rgb = vec3(0.0)
        if ti.static(not variants.rgb()):
            rgb = const_eval(st, tid) if ti.static(const) else grid_eval(st, tid, u)
        g = _colour_adjoint(st, tid, rgb, lam, d, bounded)
        if ti.static(const):
            const_eval_adjoint(st, tid, g)
        else:
            grid_eval_adjoint(st, tid, u, g)


@ti.func
def coefficients(st: ti.template(), m, p, lam):
    """(sigma_t, albedo) of medium m at world position p, as the walk's colour at wavelengths lam."""
    u = to_local(st, m, p)
    ts = st.med_sigma[m]
    ta = st.med_albedo[m]
    return _colour(st, ts, grid_eval(st, ts, u), lam, False) * st.med_scale[m], _colour(st, ta, grid_eval(st, ta, u), lam, True)


@ti.func
def coefficients_adjoint(st: ti.template(), m, p, lam, d_sigma_t, d_albedo):
    """Scatter d(objective)/d sigma_t and d/d albedo (per lane) at p into the medium's volumes."""
    u = to_local(st, m, p)
    sigma_t_adjoint(st, m, p, lam, d_sigma_t)
    if d_albedo[0] != 0.0 or d_albedo[1] != 0.0 or d_albedo[2] != 0.0:
        _scatter(st, st.med_albedo[m], u, lam, d_albedo, True, False)


@ti.func
def sigma_t_adjoint(st: ti.template(), m, p, lam, d_sigma_t):
    """Scatter d(objective)/d sigma_t (per lane) at p into the medium's sigma_t / density volume only."""
    if d_sigma_t[0] != 0.0 or d_sigma_t[1] != 0.0 or d_sigma_t[2] != 0.0:
        _scatter(st, st.med_sigma[m], to_local(st, m, p), lam, d_sigma_t * st.med_scale[m], False, False)


@ti.func
def homogeneous_coefficients(st: ti.template(), m, lam):
    """(sigma_t, albedo) of a homogeneous medium (1x1x1 volumes: no lookup code) at wavelengths lam."""
    ts = st.med_sigma[m]
    ta = st.med_albedo[m]
    return _colour(st, ts, const_eval(st, ts), lam, False) * st.med_scale[m], _colour(st, ta, const_eval(st, ta), lam, True)


@ti.func
def homogeneous_coefficients_adjoint(st: ti.template(), m, lam, d_sigma_t, d_albedo):
    _scatter(st, st.med_sigma[m], vec3(0.0), lam, d_sigma_t * st.med_scale[m], False, True)
    _scatter(st, st.med_albedo[m], vec3(0.0), lam, d_albedo, True, True)


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
def _voxel_range(cell, n):
    """Voxels (lo, hi) along one axis whose trilinear support reaches cell `cell` of MAJORANT_GRID
    over n voxels (centres at (i + 0.5) / n, clamped lookups)."""
    r = ti.static(MAJORANT_GRID)
    lo = ti.cast(ti.floor(cell * n / r - 0.5), ti.i32)
    hi = ti.cast(ti.floor((cell + 1) * n / r - 0.5), ti.i32) + 1
    return ti.min(ti.max(lo, 0), n - 1), ti.min(ti.max(hi, 0), n - 1)


@ti.kernel
def _cell_majorants(st: ti.template(), m: ti.i32, margin: float):
    """st.med_majgrid[m, cell] = max(fixed majorant, margin * scale * max of the density voxels that
    the trilinear lookup reads anywhere in the cell) for each cell of the MAJORANT_GRID^3 grid."""
    r = ti.static(MAJORANT_GRID)
    tid = st.med_sigma[m]
    base = st.tex_offset[tid]
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    d = st.tex_d[tid]
    c = st.tex_c[tid]
    for cell in range(r * r * r):
        x0, x1 = _voxel_range(cell % r, w)
        y0, y1 = _voxel_range((cell // r) % r, h)
        z0, z1 = _voxel_range(cell // (r * r), d)
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
