"""BSDF library tests: sampling vs pdf (chi-square), weight = eval / pdf, pdf normalisation,
reciprocity, energy, Fresnel against independent NumPy formulas, dispatch specialisation
and the hand-written adjoints against float64 central differences (run in a subprocess,
since a process holds one ti.init: ``python tests/test_bsdfs.py --adjoint-f64``).

All kernels are defined once at module level and shared by every model (the model is a
runtime tag, the set of compiled models the bitmask ``ALL``), so they compile once.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import taichi as ti

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tirender.backend as backend  # noqa: E402
from tirender.bsdfs import (DIFFUSE, NULL, ROUGH_CONDUCTOR, ROUGH_DIELECTRIC,  # noqa: E402
                            ROUGH_PLASTIC, SMOOTH_CONDUCTOR, SMOOTH_DIELECTRIC)
from tirender.bsdfs import dispatch  # noqa: E402
from tirender.bsdfs.common import BsdfParams  # noqa: E402
from tirender.core.math import vec2, vec3  # noqa: E402
from tirender.core.rng import make_sampler  # noqa: E402

ALL = dispatch.ALL_TYPES
# parameter row layout: reflectance(3) specular(3) transmittance(3) alpha eta cond_eta(3) cond_k(3) cond_none
NP = 18
GOLD_ETA = (0.143, 0.374, 1.442)
GOLD_K = (3.983, 2.385, 1.603)


# ----------------------------------------------------------------------------- kernels
@ti.func
def load_params(prm: ti.template(), r):
    p = BsdfParams()
    p.reflectance = vec3(prm[r, 0], prm[r, 1], prm[r, 2])
    p.specular = vec3(prm[r, 3], prm[r, 4], prm[r, 5])
    p.transmittance = vec3(prm[r, 6], prm[r, 7], prm[r, 8])
    p.alpha = prm[r, 9]
    p.eta = prm[r, 10]
    p.cond_eta = vec3(prm[r, 11], prm[r, 12], prm[r, 13])
    p.cond_k = vec3(prm[r, 14], prm[r, 15], prm[r, 16])
    p.cond_none = ti.cast(prm[r, 17], ti.i32)
    return p


@ti.func
def load3(a: ti.template(), r):
    return vec3(a[r, 0], a[r, 1], a[r, 2])


@ti.kernel
def k_sample(types: ti.template(), tag: ti.i32, prm: ti.types.ndarray(), wi_in: ti.types.ndarray(),
             seed: ti.i32, out: ti.types.ndarray()):
    """out[i] = wo(3) weight(3) pdf eta delta valid eval(wi, wo)(3) pdf(wi, wo)."""
    for i in range(out.shape[0]):
        p = load_params(prm, i % prm.shape[0])
        wi = load3(wi_in, i % wi_in.shape[0])
        rng = make_sampler(seed, i, 0)
        u1 = rng.next_1d()
        u2 = rng.next_2d()
        s = dispatch.bsdf_sample(types, tag, p, wi, u1, vec2(u2[0], u2[1]))
        e = dispatch.bsdf_eval(types, tag, p, wi, s.wo)
        pd = dispatch.bsdf_pdf(types, tag, p, wi, s.wo)
        for k in ti.static(range(3)):
            out[i, k] = s.wo[k]
            out[i, 3 + k] = s.weight[k]
            out[i, 10 + k] = e[k]
        out[i, 6] = s.pdf
        out[i, 7] = s.eta
        out[i, 8] = s.delta
        out[i, 9] = s.valid
        out[i, 13] = pd


@ti.kernel
def k_eval(types: ti.template(), tag: ti.i32, prm: ti.types.ndarray(), wi_in: ti.types.ndarray(),
           wo_in: ti.types.ndarray(), out: ti.types.ndarray()):
    """out[i] = eval(3) pdf for wi = wi_in[i % K], wo = wo_in[i], params prm[i % M]."""
    for i in range(out.shape[0]):
        p = load_params(prm, i % prm.shape[0])
        wi = load3(wi_in, i % wi_in.shape[0])
        wo = load3(wo_in, i)
        e = dispatch.bsdf_eval(types, tag, p, wi, wo)
        for k in ti.static(range(3)):
            out[i, k] = e[k]
        out[i, 3] = dispatch.bsdf_pdf(types, tag, p, wi, wo)


@ti.kernel
def k_adjoint(types: ti.template(), tag: ti.i32, prm: ti.types.ndarray(), wi_in: ti.types.ndarray(),
              wo_in: ti.types.ndarray(), dout_in: ti.types.ndarray(), out: ti.types.ndarray()):
    """out[i] = d reflectance(3), d specular(3), d transmittance(3), d alpha."""
    for i in range(out.shape[0]):
        p = load_params(prm, i % prm.shape[0])
        wi = load3(wi_in, i % wi_in.shape[0])
        wo = load3(wo_in, i)
        d = load3(dout_in, i)
        g = dispatch.bsdf_eval_adjoint(types, tag, p, wi, wo, d)
        for k in ti.static(range(3)):
            out[i, k] = g.reflectance[k]
            out[i, 3 + k] = g.specular[k]
            out[i, 6 + k] = g.transmittance[k]
        out[i, 9] = g.alpha


# ----------------------------------------------------------------------------- helpers
def fdt():
    return np.float64 if backend._state.get("fp") == "f64" else np.float32


def make_params(n=1, reflectance=(0.5, 0.5, 0.5), specular=(1.0, 1.0, 1.0), transmittance=(1.0, 1.0, 1.0),
                alpha=0.3, eta=1.5, cond_eta=GOLD_ETA, cond_k=GOLD_K, cond_none=0):
    row = np.array(list(reflectance) + list(specular) + list(transmittance) + [alpha, eta]
                   + list(cond_eta) + list(cond_k) + [cond_none], dtype=np.float64)
    return np.ascontiguousarray(np.tile(row, (n, 1)).astype(fdt()))


def sph(theta_deg, phi=0.3):
    t = math.radians(theta_deg)
    return np.array([[math.sin(t) * math.cos(phi), math.sin(t) * math.sin(phi), math.cos(t)]], dtype=fdt())


def run_sample(tag, prm, wi, n, seed=1, types=ALL):
    out = np.zeros((n, 14), dtype=fdt())
    k_sample(types, tag, prm, np.ascontiguousarray(wi, dtype=fdt()), seed, out)
    return out.astype(np.float64)


def run_eval(tag, prm, wi, wo, types=ALL):
    wo = np.ascontiguousarray(wo, dtype=fdt())
    out = np.zeros((wo.shape[0], 4), dtype=fdt())
    k_eval(types, tag, prm, np.ascontiguousarray(wi, dtype=fdt()), wo, out)
    return out.astype(np.float64)


def run_adjoint(tag, prm, wi, wo, dout, types=ALL):
    wo = np.ascontiguousarray(wo, dtype=fdt())
    out = np.zeros((wo.shape[0], 10), dtype=fdt())
    k_adjoint(types, tag, prm, np.ascontiguousarray(wi, dtype=fdt()), wo,
              np.ascontiguousarray(dout, dtype=fdt()), out)
    return out.astype(np.float64)


def uniform_sphere(rng, n):
    v = rng.normal(size=(n, 3))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def upper(v):
    v = v.copy()
    v[:, 2] = np.abs(v[:, 2])
    return v


def gammaq(a, x):
    """Regularised upper incomplete gamma Q(a, x) (Numerical Recipes gser / gcf)."""
    if x <= 0.0:
        return 1.0
    gln = math.lgamma(a)
    if x < a + 1.0:
        ap, s, d = a, 1.0 / a, 1.0 / a
        for _ in range(10000):
            ap += 1.0
            d *= x / ap
            s += d
            if abs(d) < abs(s) * 1e-15:
                break
        return max(0.0, 1.0 - s * math.exp(-x + a * math.log(x) - gln))
    b = x + 1.0 - a
    c = 1.0 / 1e-300
    d = 1.0 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - gln) * h


def chi2_pvalue(obs, exp, pool=5.0):
    """Mitsuba's chi-square test: cells sorted by expected count, low ones pooled."""
    order = np.argsort(exp, kind="stable")
    obs, exp = obs[order], exp[order]
    if np.any((exp <= 0.0) & (obs > 0)):
        return 0.0, 0, 0.0
    chsq, dof, po, pe = 0.0, 0, 0.0, 0.0
    for o, e in zip(obs, exp):
        if e == 0.0 and o == 0:
            continue
        if e < pool:
            po += o
            pe += e
            if pe > pool:
                chsq += (po - pe) ** 2 / pe
                dof += 1
                po = pe = 0.0
        else:
            chsq += (o - e) ** 2 / e
            dof += 1
    if pe > 0.0:
        chsq += (po - pe) ** 2 / pe
        dof += 1
    dof -= 1
    return gammaq(dof / 2.0, chsq / 2.0), dof, chsq


# (phi, cos theta) grid: equal-area cells (as Mitsuba's SphericalDomain). The pdf is
# integrated per cell with a Gauss-Legendre rule in (phi, theta) (dω = sin θ dθ dφ): in θ
# the integrand stays smooth at the poles, and an open rule never evaluates the pdf on the
# horizon, where it jumps.
N_PHI, N_COS, NGL = 48, 24, 12


def integrate_pdf_cells(tag, prm, wi):
    x, w = np.polynomial.legendre.leggauss(NGL)
    t, w = 0.5 * (x + 1.0), 0.5 * w                                 # nodes / weights on [0, 1]
    zb = np.linspace(-1.0, 1.0, N_COS + 1)
    th_lo, th_hi = np.arccos(zb[1:]), np.arccos(zb[:-1])            # per row, th_lo < th_hi
    theta = th_lo[:, None] + (th_hi - th_lo)[:, None] * t[None, :]  # (N_COS, NGL)
    pb = np.linspace(-math.pi, math.pi, N_PHI + 1)
    phi = pb[:-1, None] + (2.0 * math.pi / N_PHI) * t[None, :]      # (N_PHI, NGL)
    TH, PHI = np.meshgrid(theta.ravel(), phi.ravel(), indexing="ij")
    st = np.sin(TH)
    wo = np.stack([st * np.cos(PHI), st * np.sin(PHI), np.cos(TH)], axis=-1).reshape(-1, 3)
    f = (run_eval(tag, prm, wi, wo)[:, 3].reshape(TH.shape) * st).reshape(N_COS, NGL, N_PHI, NGL)
    cells = np.einsum("aibj,i,j->ab", f, w, w)
    return cells * (th_hi - th_lo)[:, None] * (2.0 * math.pi / N_PHI)


def histogram(wo, valid):
    wo = wo[valid]
    phi = np.arctan2(wo[:, 1], wo[:, 0])
    iphi = np.clip(((phi + math.pi) / (2 * math.pi) * N_PHI).astype(int), 0, N_PHI - 1)
    iz = np.clip(((wo[:, 2] + 1.0) / 2.0 * N_COS).astype(int), 0, N_COS - 1)
    h = np.zeros((N_COS, N_PHI))
    np.add.at(h, (iz, iphi), 1.0)
    return h


# ----------------------------------------------------------------------------- sampling tests
N_CHI2 = 200_000
P_THRESHOLD = 1e-2

# (name, tag, params kwargs, theta_i in degrees; > 90 = arriving from inside)
CHI2_CASES = [
    ("diffuse", DIFFUSE, dict(), 40.0),
    ("roughconductor_a0.15_t20", ROUGH_CONDUCTOR, dict(alpha=0.15), 20.0),
    ("roughconductor_a0.5_t70", ROUGH_CONDUCTOR, dict(alpha=0.5), 70.0),
    ("roughconductor_a1.0_t45", ROUGH_CONDUCTOR, dict(alpha=1.0, cond_none=1), 45.0),
    ("roughdielectric_a0.2_eta1.5_t35", ROUGH_DIELECTRIC, dict(alpha=0.2, eta=1.5), 35.0),
    ("roughdielectric_a0.6_eta1.5_t75", ROUGH_DIELECTRIC, dict(alpha=0.6, eta=1.5), 75.0),
    ("roughdielectric_a0.3_eta1.5_inside_t140", ROUGH_DIELECTRIC, dict(alpha=0.3, eta=1.5), 140.0),
    ("roughdielectric_a0.5_eta0.75_t50", ROUGH_DIELECTRIC, dict(alpha=0.5, eta=1.0 / 1.33), 50.0),
    ("roughplastic_a0.1_t30", ROUGH_PLASTIC, dict(alpha=0.1, eta=1.49, reflectance=(0.2, 0.5, 0.8)), 30.0),
    ("roughplastic_a0.6_t75", ROUGH_PLASTIC, dict(alpha=0.6, eta=1.49, reflectance=(0.7, 0.3, 0.1)), 75.0),
]

_chi2_report = {}


@pytest.mark.parametrize("name,tag,kw,theta", CHI2_CASES, ids=[c[0] for c in CHI2_CASES])
def test_sampling_chi2_and_weights(name, tag, kw, theta):
    prm = make_params(**kw)
    wi = sph(theta)
    out = run_sample(tag, prm, wi, N_CHI2, seed=7 + tag)
    valid = out[:, 9] > 0.5
    assert np.all(np.isfinite(out)), "NaN/Inf in sample output"
    assert np.all(out[:, 8] == 0), "rough models must not report delta samples"

    # chi-square: histogram of sampled wo vs pdf integrated per cell
    cells = integrate_pdf_cells(tag, prm, wi)
    obs = histogram(out[:, :3], valid)
    pval, dof, chsq = chi2_pvalue(obs.ravel(), cells.ravel() * N_CHI2)
    _chi2_report[name] = pval
    print(f"{name}: chi2={chsq:.1f} dof={dof} p={pval:.4f} valid={valid.mean():.4f} int_pdf={cells.sum():.4f}")
    assert pval > P_THRESHOLD, f"{name}: chi-square p-value {pval:.3g} (chi2={chsq:.1f}, dof={dof})"

    # the pdf integrates to the fraction of valid samples
    assert abs(cells.sum() - valid.mean()) < 5e-3, (cells.sum(), valid.mean())

    # sample's pdf == pdf(wi, wo), weight == eval / pdf on the sampled directions
    v = out[valid]
    s_pdf, pdf_wo = v[:, 6], v[:, 13]
    assert np.all(s_pdf > 0)
    rel_pdf = np.abs(s_pdf - pdf_wo) / pdf_wo
    w, e = v[:, 3:6], v[:, 10:13]
    ratio = e / pdf_wo[:, None]
    rel_w = np.abs(w - ratio) / np.maximum(np.abs(ratio), 1e-6)
    print(f"   pdf rel err p99.9={np.quantile(rel_pdf, 0.999):.2e} max={rel_pdf.max():.2e};"
          f" weight rel err p99.9={np.quantile(rel_w, 0.999):.2e} max={rel_w.max():.2e}")
    assert np.quantile(rel_pdf, 0.999) < 1e-4 and rel_pdf.max() < 5e-3
    assert np.quantile(rel_w, 0.999) < 1e-4 and rel_w.max() < 5e-3
    # unit directions
    assert np.allclose(np.linalg.norm(v[:, :3], axis=1), 1.0, atol=1e-4)


def test_one_sided_models_reject_back_side():
    rng = np.random.default_rng(3)
    wi = -upper(uniform_sphere(rng, 64))
    wo = uniform_sphere(rng, 64)
    for tag in (DIFFUSE, ROUGH_CONDUCTOR, ROUGH_PLASTIC, SMOOTH_CONDUCTOR):
        prm = make_params()
        out = run_sample(tag, prm, wi, 64)
        assert np.all(out[:, 9] == 0), tag
        ev = run_eval(tag, prm, wi, wo)
        assert np.all(ev == 0.0), tag


def test_grazing_and_small_alpha_are_finite():
    rng = np.random.default_rng(11)
    n = 4096
    wi = uniform_sphere(rng, n)
    wi[: n // 4, 2] = 0.0                     # exactly grazing
    wi[n // 4: n // 2, 2] = 1e-7              # almost grazing
    wi[n // 2: n // 2 + 16] = [0.0, 0.0, 1.0]  # normal incidence
    wi /= np.linalg.norm(wi, axis=1, keepdims=True)
    wo = uniform_sphere(rng, n)
    wo[::7] = wi[::7] * np.array([-1.0, -1.0, 1.0])  # exact mirror directions
    wo[1::7] = -wi[1::7]                              # straight through
    for alpha in (1e-6, 1e-3, 0.5):
        for tag in (DIFFUSE, SMOOTH_CONDUCTOR, ROUGH_CONDUCTOR, SMOOTH_DIELECTRIC, ROUGH_DIELECTRIC,
                    ROUGH_PLASTIC, NULL):
            prm = make_params(alpha=alpha)
            out = run_sample(tag, prm, wi, n, seed=5)
            ev = run_eval(tag, prm, wi, wo)
            ad = run_adjoint(tag, prm, wi, wo, np.ones((n, 3)))
            assert np.all(np.isfinite(out)) and np.all(np.isfinite(ev)) and np.all(np.isfinite(ad)), (tag, alpha)
            v = out[:, 9] > 0.5
            assert np.all(out[v, 6] > 0.0)


# ----------------------------------------------------------------------------- reciprocity
def test_reciprocity():
    rng = np.random.default_rng(5)
    n = 20000
    a = upper(uniform_sphere(rng, n))
    b = upper(uniform_sphere(rng, n))
    cases = [
        (DIFFUSE, dict(reflectance=(0.3, 0.6, 0.9)), 1.0),
        (ROUGH_CONDUCTOR, dict(alpha=0.3), 1.0),
        (ROUGH_CONDUCTOR, dict(alpha=0.05, cond_none=1), 1.0),
        (ROUGH_PLASTIC, dict(alpha=0.2, eta=1.49, reflectance=(0.3, 0.6, 0.9)), 1.0),
        (ROUGH_DIELECTRIC, dict(alpha=0.3, eta=1.5), 1.0),   # reflection, outside
        (ROUGH_DIELECTRIC, dict(alpha=0.3, eta=1.5), -1.0),  # reflection, inside
    ]
    for tag, kw, side in cases:
        prm = make_params(**kw)
        wi, wo = a * side, b * side
        f_io = run_eval(tag, prm, wi, wo)[:, :3] / np.abs(wo[:, 2:3])
        f_oi = run_eval(tag, prm, wo, wi)[:, :3] / np.abs(wi[:, 2:3])
        scale = np.maximum(np.abs(f_io), np.abs(f_oi))
        ok = np.abs(f_io - f_oi) <= 1e-3 * scale + 1e-6
        assert ok.mean() > 0.999 and (f_io > 0).any(), (tag, kw, side, ok.mean())

    # rough dielectric transmission, radiance mode: f(wi,wo)/f(wo,wi) = (eta_i / eta_o)^2
    prm = make_params(alpha=0.4, eta=1.5)
    wi, wo = a, -b
    f_io = run_eval(ROUGH_DIELECTRIC, prm, wi, wo)[:, 0] / np.abs(wo[:, 2])
    f_oi = run_eval(ROUGH_DIELECTRIC, prm, wo, wi)[:, 0] / np.abs(wi[:, 2])
    m = (f_io > 1e-6) | (f_oi > 1e-6)
    assert m.mean() > 0.1
    # f32: a few pairs with tiny values (wi·m or wo·m ~ 0: cancellation) are less accurate
    ok = np.abs(f_io[m] * 1.5 ** 2 - f_oi[m]) <= 1e-3 * f_oi[m] + 1e-5
    assert ok.mean() > 0.999, ok.mean()


# ----------------------------------------------------------------------------- energy
def test_rough_conductor_albedo():
    rng = np.random.default_rng(9)
    for theta in (0.0, 30.0, 60.0, 80.0):
        wi = sph(theta)
        prev = None
        for alpha in (0.01, 0.1, 0.5, 1.0):
            prm = make_params(alpha=alpha, cond_none=1, specular=(1.0, 1.0, 1.0))
            out = run_sample(ROUGH_CONDUCTOR, prm, wi, 100_000, seed=3)
            albedo = np.where(out[:, 9] > 0.5, out[:, 3], 0.0).mean()
            assert albedo <= 1.0 + 1e-5
            if alpha == 0.01:
                assert albedo > 0.995, (theta, albedo)
            if alpha >= 0.5:
                # independent estimate: uniform sphere sampling of eval
                wo = uniform_sphere(rng, 200_000)
                f = run_eval(ROUGH_CONDUCTOR, prm, wi, wo)[:, 0] * 4.0 * math.pi
                assert abs(f.mean() - albedo) < 4.0 * f.std() / math.sqrt(len(f)) + 1e-3, (theta, alpha)
            if prev is not None:
                assert albedo <= prev + 2e-3   # rougher -> more masking loss
            prev = albedo


def fresnel_np(cos_i, eta):
    cos_i = np.asarray(cos_i, dtype=np.float64)
    e = np.where(cos_i < 0.0, 1.0 / eta, eta)
    c = np.abs(cos_i)
    sin_t2 = (1.0 - c * c) / (e * e)
    cos_t = np.sqrt(np.maximum(0.0, 1.0 - sin_t2))
    rs = (c - e * cos_t) / (c + e * cos_t)
    rp = (e * c - cos_t) / (e * c + cos_t)
    return np.where(sin_t2 >= 1.0, 1.0, 0.5 * (rs * rs + rp * rp))


def test_smooth_dielectric_energy_and_directions():
    rng = np.random.default_rng(13)
    n = 200_000
    wi = uniform_sphere(rng, n).astype(fdt()).astype(np.float64)
    for eta in (1.5, 1.0 / 1.33):
        prm = make_params(eta=eta, specular=(1.0, 1.0, 1.0), transmittance=(1.0, 1.0, 1.0))
        out = run_sample(SMOOTH_DIELECTRIC, prm, wi, n, seed=17)
        v = out[:, 9] > 0.5
        assert v.all() and np.all(out[:, 8] == 1)
        wo, w, pdf, seta = out[:, :3], out[:, 3:6], out[:, 6], out[:, 7]
        refl = wo[:, 2] * wi[:, 2] > 0
        F = fresnel_np(wi[:, 2], eta)
        # discrete probabilities = Fresnel (independent formula; f32 rounding matters only
        # next to the critical angle, where dF/dcos θ is unbounded)
        err = np.abs(pdf - np.where(refl, F, 1.0 - F))
        assert np.quantile(err, 0.999) < 1e-5 and err.max() < 1e-3, (np.quantile(err, 0.999), err.max())
        assert abs(refl.mean() - F.mean()) < 4.0 * math.sqrt(F.mean() * (1 - F.mean()) / n)
        # energy: weight * eta^2 (undo the radiance 1/eta^2 scaling) == 1 for both events
        assert np.allclose(w[refl], 1.0, atol=1e-6) and np.all(seta[refl] == 1.0)
        assert np.allclose(w[~refl] * (seta[~refl] ** 2)[:, None], 1.0, rtol=1e-5)
        # E[R + T] = 1 with the scaling accounted for
        assert abs(np.mean(np.where(refl, w[:, 0], w[:, 0] * seta ** 2)) - 1.0) < 1e-5
        # directions: mirror / Snell
        assert np.allclose(wo[refl], wi[refl] * np.array([-1.0, -1.0, 1.0]), atol=1e-6)
        eta_it = np.where(wi[:, 2] > 0, eta, 1.0 / eta)
        assert np.allclose(seta[~refl], eta_it[~refl], rtol=1e-6)
        assert np.allclose(wo[~refl, :2], -wi[~refl, :2] / eta_it[~refl, None], atol=1e-5)
        assert np.allclose(np.linalg.norm(wo, axis=1), 1.0, atol=1e-5)
        # no eval / pdf for Dirac lobes
        ev = run_eval(SMOOTH_DIELECTRIC, prm, wi[:1000], wo[:1000])
        assert np.all(ev == 0.0)


def test_rough_dielectric_albedo():
    for eta in (1.5, 1.0 / 1.5):
        for theta in (10.0, 50.0, 120.0, 170.0):
            wi = sph(theta)
            for alpha in (0.01, 0.5):
                prm = make_params(alpha=alpha, eta=eta)
                out = run_sample(ROUGH_DIELECTRIC, prm, wi, 100_000, seed=23)
                v = out[:, 9] > 0.5
                # undo the radiance scaling on transmission
                a = np.where(v, out[:, 3] * out[:, 7] ** 2, 0.0).mean()
                assert a <= 1.0 + 1e-5, (eta, theta, alpha, a)
                if alpha == 0.01:
                    assert a > 0.99, (eta, theta, alpha, a)


# ----------------------------------------------------------------------------- Fresnel, conductor, null
def fresnel_conductor_np(cos_i, eta, k):
    n = eta + 1j * k
    s2 = 1.0 - cos_i ** 2
    cos_t = np.sqrt(1.0 - s2 / (n * n))
    rs = (cos_i - n * cos_t) / (cos_i + n * cos_t)
    rp = (n * cos_i - cos_t) / (n * cos_i + cos_t)
    return 0.5 * (np.abs(rs) ** 2 + np.abs(rp) ** 2)


def test_smooth_conductor_fresnel():
    rng = np.random.default_rng(21)
    n = 4096
    wi = upper(uniform_sphere(rng, n))
    prm = make_params(specular=(0.9, 0.8, 0.7))
    out = run_sample(SMOOTH_CONDUCTOR, prm, wi, n)
    assert np.all(out[:, 9] == 1) and np.all(out[:, 8] == 1) and np.all(out[:, 6] == 1.0)
    assert np.allclose(out[:, :3], wi * np.array([-1.0, -1.0, 1.0]), atol=1e-6)
    ref = np.stack([fresnel_conductor_np(wi[:, 2], GOLD_ETA[c], GOLD_K[c]) for c in range(3)], axis=1)
    assert np.allclose(out[:, 3:6], ref * np.array([0.9, 0.8, 0.7]), rtol=2e-4, atol=1e-6)
    prm = make_params(specular=(0.9, 0.8, 0.7), cond_none=1)
    out = run_sample(SMOOTH_CONDUCTOR, prm, wi, n)
    assert np.allclose(out[:, 3:6], [0.9, 0.8, 0.7], atol=1e-7)


def test_rough_conductor_uses_conductor_fresnel():
    # near-mirror: eval / pdf (= weight) at the mirror direction -> F(cos θi) * specular
    for theta in (10.0, 45.0, 75.0):
        wi = sph(theta)
        prm = make_params(alpha=0.002)
        out = run_sample(ROUGH_CONDUCTOR, prm, wi, 2000)
        v = out[:, 9] > 0.5
        ref = np.array([fresnel_conductor_np(math.cos(math.radians(theta)), GOLD_ETA[c], GOLD_K[c])
                        for c in range(3)])
        assert np.allclose(np.median(out[v, 3:6], axis=0), ref, rtol=2e-3)


def test_null_and_dispatch_specialisation():
    rng = np.random.default_rng(2)
    wi = uniform_sphere(rng, 256)
    prm = make_params()
    out = run_sample(NULL, prm, wi, 256)
    assert np.allclose(out[:, :3], -wi, atol=1e-7)
    assert np.all(out[:, 3:6] == 1.0) and np.all(out[:, 6:10] == 1.0)
    assert np.all(run_eval(NULL, prm, wi, -wi) == 0.0)
    # a kernel specialised to {diffuse} treats any other tag as black
    mask = dispatch.types_mask([DIFFUSE])
    wi_u, wo_u = upper(wi), upper(uniform_sphere(rng, 256))
    ev_d = run_eval(DIFFUSE, prm, wi_u, wo_u, types=mask)
    assert np.allclose(ev_d[:, 0], 0.5 * wo_u[:, 2] / math.pi, rtol=1e-5)
    assert np.all(run_eval(ROUGH_PLASTIC, prm, wi_u, wo_u, types=mask) == 0.0)
    assert np.all(run_eval(ROUGH_PLASTIC, prm, wi_u, wo_u)[:, 0] > 0.0)
    with pytest.raises(ValueError):
        dispatch.types_mask([7])
    assert dispatch.ALL_TYPES == 0b1111111


# ----------------------------------------------------------------------------- adjoints (f64 subprocess)
# per model: (name, tag, differentiable fields, direction domain); GRAD_FIELDS: columns of k_adjoint's output
GRAD_FIELDS = {"reflectance": [0, 1, 2], "specular": [3, 4, 5], "transmittance": [6, 7, 8], "alpha": [9]}
ADJ_MODELS = [
    ("diffuse", DIFFUSE, ["reflectance"], "upper"),
    ("roughconductor", ROUGH_CONDUCTOR, ["specular", "alpha"], "upper"),
    ("roughconductor_none", ROUGH_CONDUCTOR, ["specular", "alpha"], "upper"),
    ("roughplastic", ROUGH_PLASTIC, ["reflectance", "specular", "alpha"], "upper"),
    ("roughdielectric", ROUGH_DIELECTRIC, ["specular", "transmittance", "alpha"], "sphere"),
]


def adjoint_check(n=3000, h=1e-5):
    """Max relative error of eval_adjoint vs central differences of eval, per model and field."""
    rng = np.random.default_rng(1234)
    report = {}
    for name, tag, fields, dirs in ADJ_MODELS:
        prm = np.zeros((n, NP))
        prm[:, 0:3] = rng.uniform(0.05, 0.95, (n, 3))
        prm[:, 3:6] = rng.uniform(0.2, 1.0, (n, 3))
        prm[:, 6:9] = rng.uniform(0.2, 1.0, (n, 3))
        prm[:, 9] = rng.uniform(0.05, 0.9, n)
        prm[:, 10] = np.where(rng.uniform(size=n) < 0.5, rng.uniform(1.2, 2.0, n), 1.0 / rng.uniform(1.2, 2.0, n))
        prm[:, 11:14] = GOLD_ETA
        prm[:, 14:17] = GOLD_K
        prm[:, 17] = 1.0 if name.endswith("_none") else 0.0
        wi = uniform_sphere(rng, n)
        wo = uniform_sphere(rng, n)
        if dirs == "upper":
            wi, wo = upper(wi), upper(wo)
        else:
            # half of the pairs mirrored into the reflection configuration, lobes well covered
            refl = rng.uniform(size=n) < 0.5
            wo[refl] = np.where((wo[refl, 2] * wi[refl, 2] < 0)[:, None], wo[refl] * [1, 1, -1], wo[refl])
        dout = rng.normal(size=(n, 3))
        grad = run_adjoint(tag, prm, wi, wo, dout)
        rep = {}
        for field in fields:
            worst, nonzero = 0.0, 0
            for col in GRAD_FIELDS[field]:
                pp, pm = prm.copy(), prm.copy()
                pp[:, col] += h
                pm[:, col] -= h
                ep = run_eval(tag, pp, wi, wo)[:, :3]
                em = run_eval(tag, pm, wi, wo)[:, :3]
                fd = np.sum(dout * (ep - em), axis=1) / (2.0 * h)
                ad = grad[:, col]
                scale = np.maximum(np.abs(fd), np.abs(ad))
                m = scale > 1e-9
                nonzero += int(m.sum())
                if m.any():
                    worst = max(worst, float(np.max(np.abs(fd[m] - ad[m]) / scale[m])))
            rep[field] = {"max_rel_err": worst, "nonzero": nonzero}
        # gradients of fields the model does not depend on must be exactly 0
        others = [c for f, cols in GRAD_FIELDS.items() if f not in fields for c in cols]
        rep["other_fields_zero"] = bool(np.all(grad[:, others] == 0.0))
        report[name] = rep
    return report


def test_adjoints_vs_finite_differences_f64():
    env = dict(os.environ)
    env.pop("TIRENDER_FP", None)
    # Taichi freezes `float` in vector / struct types when they are created (at import of
    # tirender.core.math), so the f64 process must call ti.init before importing tirender.
    code = ("import sys, runpy; sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); sys.argv = [%r, '--adjoint-f64']; "
            "runpy.run_path(%r, run_name='__main__')" % (ROOT, __file__, os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    for name, rep in report.items():
        assert rep.pop("other_fields_zero"), name
        for field, r in rep.items():
            assert r["nonzero"] > 100, (name, field, r)
            assert r["max_rel_err"] <= 1e-3, (name, field, r)


if __name__ == "__main__":
    # run through test_adjoints_vs_finite_differences_f64 (ti.init(f64) before importing tirender)
    if "--adjoint-f64" in sys.argv:
        backend.init("cpu", fp="f64")
        assert vec3.dtype == ti.f64, "tirender was imported before ti.init(default_fp=f64)"
        print(json.dumps(adjoint_check()))
