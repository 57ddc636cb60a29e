"""Primary sample space: the state of Markov chains over the random numbers of a path (Kelemen et
al. 2002; the lazy mutations of pbrt-v3's MLTSampler), read by the walk through the same
``next_1d`` / ``next_2d`` interface as the PCG32 stream (core/rng.py).

A chain's state is a vector u ∈ [0, 1)^∞ of primary samples; dimension d is the d-th number the
path reads (0, 1: the film position). The first ``MAX_DIMS`` dimensions are stored per chain
(``ChainStore``); later ones are drawn afresh at every read (an independence proposal for them,
symmetric, so Metropolis–Hastings stays exact for paths of any length).

Every random number is a hash of (seed, chain, proposal, dimension, purpose) — a counter-based
generator — so a proposal is a pure function of the stored state: reading it writes nothing,
the paths of a bundle may read it in any order or in parallel threads (``mcmc.py``'s two
schedules take the same decisions), and a reject has nothing to undo. ``commit`` writes an
accepted proposal's dimensions.

Mutations are lazy: the proposal's value of dimension d is a fresh uniform number in a large step
(probability ``large_step`` per proposal), else the current value plus the accumulated small
steps since d was last changed, a wrapped symmetric offset of std σ·sqrt(n) (any symmetric
proposal keeps Metropolis–Hastings exact; a triangular one is cheaper than pbrt-v3's normal). A
dimension the chain never stored, or last changed before the last accepted large step, holds a
uniform number of (chain, dimension, that step) — its value in the current state.

Coherent bundles (Nimier-David et al. 2019 §4.2): with ``kernel`` σ_G > 0, member b of a bundle
reads frac(u_d − δ_bd), δ_bd ~ N(0, σ_G²) per dimension and proposal, so the B paths of a bundle read
the same centre u with independent Gaussian offsets — an unbiased estimate of the convolution G ∗ f.

Modes: BOOTSTRAP (independent uniform numbers of (seed, key = bootstrap index, d)), INIT (the same,
stored as chain ``chain``'s state), HOLD (the current state), PROPOSE (proposal ``key`` of the chain).
"""
import math

import taichi as ti

from .rng import hash_u32, pair

MAX_DIMS = 64
BUNDLE_MAX = 16
BOOTSTRAP, INIT, HOLD, PROPOSE = 0, 1, 2, 3
TAG_LAZY, TAG_LARGE, TAG_SMALL, TAG_OFFSET, TAG_OFFSET2, TAG_STEP, TAG_ACCEPT, TAG_BOOT = range(1, 9)
_ONE_MINUS = 0.99999994   # largest float32 below 1


class ChainStore:
    """Per-chain fields (capacity ``chains``): the stored dimensions u (value) with the proposal
    time of their last change (mod), the number stored (used), the accepted-proposal count
    (iteration), the proposal counter (proposal, the key of the chain's random numbers), the time
    of the last accepted large step (last_large); the current bundle's estimate f̂ and its summed
    expected-value weight; two bundles of film positions and film RGB values (pos, L: the current
    one at ``slot``, the proposal's at the other, so an accept flips an index instead of copying); the
    proposal's dimensions read and vertices walked per path (new_*); the normalisation sums of the
    large steps; statistics."""

    def __init__(self, chains):
        self.chains = chains
        self.value = ti.field(ti.f32, shape=(chains, MAX_DIMS))
        self.mod = ti.field(ti.i32, shape=(chains, MAX_DIMS))
        self._per_chain(ti.i32, "used", "iteration", "proposal", "last_large")
        self._per_chain(ti.f32, "f_cur", "w_cur")
        # two bundles per chain, the current one at slot[c] (0 or 1), the proposal's at the other
        self._per_chain(ti.i32, "slot")
        self.pos = ti.Vector.field(2, ti.f32, shape=(chains, 2 * BUNDLE_MAX))
        self.L = ti.Vector.field(3, ti.f32, shape=(chains, 2 * BUNDLE_MAX))
        self.new_dims = ti.field(ti.i32, shape=(chains, BUNDLE_MAX))
        self.new_n = ti.field(ti.i32, shape=(chains, BUNDLE_MAX))
        # f̂ of the large-step proposals (uniform states: unbiased for the normalisation b), their count
        self._per_chain(ti.f32, "large_f")
        self._per_chain(ti.i32, "large_n")
        # statistics since the chains started: accepted proposals, Σ_b n_b and B · max_b n_b (lane use)
        self._per_chain(ti.i64, "accepted", "lanes_busy", "lanes_total")

    def _per_chain(self, dtype, *names):
        """One scalar field of dtype per chain for each name."""
        for name in names:
            setattr(self, name, ti.field(dtype, shape=self.chains))


_store = None
_generation = 0


def store(chains):
    """The process's chain store with room for ``chains`` chains (grown to a power of two when a
    run needs more; kernels that read it are rebuilt then: see ``generation``)."""
    global _store, _generation
    if _store is None or _store.chains < chains:
        _store = ChainStore(1 << max(10, math.ceil(math.log2(max(chains, 1)))))
        _generation += 1
    return _store


def current():
    """The chain store (None before the first ``store`` call)."""
    return _store


def generation():
    """Changes whenever ``store`` allocates new fields (a cache key for kernels that use them)."""
    return _generation


@ti.func
def _frac(x):
    y = x - ti.floor(x)
    return ti.min(y, _ONE_MINUS)


@ti.func
def uniform(seed, a, b, c, tag):
    """A uniform number in [0, 1) of (seed, a, b, c, tag) (24 bits)."""
    return ti.cast(hash_u32(seed, a, b, c * 16 + tag) >> ti.u32(8), ti.f32) * (1.0 / 16777216.0)


@ti.func
def symmetric(seed, a, b, c):
    """A small-step offset of unit variance: triangular (u1 − u2)·√6 from the two 16-bit halves of
    one hash (symmetric, which is all a Metropolis proposal needs)."""
    x = hash_u32(seed, a, b, c * 16 + TAG_SMALL)
    return (ti.cast(x >> ti.u32(16), ti.f32) - ti.cast(x & ti.u32(0xFFFF), ti.f32)) * (2.449489742783178 / 65536.0)


@ti.func
def normal(seed, a, b, c):
    """A standard normal number (Box–Muller) of (seed, a, b, c)."""
    u1 = uniform(seed, a, b, c, TAG_OFFSET)
    u2 = uniform(seed, a, b, c, TAG_OFFSET2)
    return ti.sqrt(-2.0 * ti.log(1.0 - u1)) * ti.cos(2.0 * math.pi * u2)


@ti.func
def state_value(seed, c, d):
    """(u_d, time of its last change) of chain c's current state (d < MAX_DIMS)."""
    v = 0.0
    mod = _store.last_large[c]
    if d < _store.used[c] and _store.mod[c, d] >= mod:
        v = _store.value[c, d]
        mod = _store.mod[c, d]
    else:                                   # never stored, or resampled by an accepted large step
        v = uniform(seed, c, mod, d, TAG_LAZY)
    return v, mod


@ti.func
def proposed_value(seed, c, d, key, large, sigma):
    """u'_d of proposal ``key`` of chain c (large: a large step)."""
    u = 0.0
    if d >= MAX_DIMS or large:
        u = uniform(seed, c, key, d, TAG_LARGE)
    else:
        v, mod = state_value(seed, c, d)
        n = ti.cast(_store.iteration[c] + 1 - mod, ti.f32)
        u = _frac(v + symmetric(seed, c, key, d) * sigma * ti.sqrt(n))
    return u


@ti.dataclass
class PssSampler:
    """A path's view of chain ``chain``'s primary samples (see the module doc): dim: the next
    dimension read; key: the proposal (PROPOSE) or bootstrap sample (BOOTSTRAP, INIT); large:
    whether the proposal is a large step; member: the bundle member (its offsets); sigma: the
    small-step std; kernel: the bundle offsets' std σ_G (0: none); seed: the render's seed."""
    chain: ti.i32
    dim: ti.i32
    mode: ti.i32
    key: ti.i32
    large: ti.i32
    member: ti.i32
    sigma: ti.f32
    kernel: ti.f32
    seed: ti.u32

    @ti.func
    def next_1d(self):
        d = self.dim
        self.dim += 1
        u = 0.0
        if self.mode == BOOTSTRAP or self.mode == INIT:
            u = uniform(self.seed, self.key, TAG_BOOT, d, TAG_BOOT)
            if self.mode == INIT and d < MAX_DIMS:
                _store.value[self.chain, d] = u
                _store.mod[self.chain, d] = 0
                _store.used[self.chain] = d + 1
        elif self.mode == HOLD:
            if d < MAX_DIMS:
                u, mod = state_value(self.seed, self.chain, d)
            else:
                u = uniform(self.seed, self.chain, self.key, d, TAG_LARGE)
        else:
            u = proposed_value(self.seed, self.chain, d, self.key, self.large, self.sigma)
        if self.kernel > 0.0:
            u = _frac(u - self.kernel * normal(self.seed, self.chain, self.key, d * BUNDLE_MAX + self.member))
        return u

    @ti.func
    def next_2d(self):
        return pair(self)

    @ti.func
    def copy(self):
        return PssSampler(chain=self.chain, dim=self.dim, mode=self.mode, key=self.key, large=self.large,
                          member=self.member, sigma=self.sigma, kernel=self.kernel, seed=self.seed)


@ti.func
def proposal(c, key, seed, large_step, sigma, kernel, member):
    """The sampler of chain c's proposal ``key`` (its counter + 1) for bundle member ``member``
    (large with probability large_step)."""
    large = 1 if uniform(seed, c, key, 0, TAG_STEP) < large_step else 0
    return PssSampler(chain=c, dim=0, mode=PROPOSE, key=key, large=large, member=member, sigma=sigma, kernel=kernel,
                      seed=seed)


@ti.func
def accept_draw(c, key, seed):
    """The uniform number that decides chain c's proposal ``key``."""
    return uniform(seed, c, key, 0, TAG_ACCEPT)


@ti.func
def commit(smp, dims):
    """Make proposal smp the chain's state: its first ``dims`` dimensions (those its paths read)
    take the proposed values; the counters advance (a large step becomes the last one)."""
    c = smp.chain
    t = _store.iteration[c] + 1
    top = ti.min(dims, MAX_DIMS)
    for d in range(top):      # each dimension's proposal reads only its own stored value first
        u = proposed_value(smp.seed, c, d, smp.key, smp.large, smp.sigma)
        _store.value[c, d] = u
        _store.mod[c, d] = t
    _store.used[c] = ti.max(_store.used[c], top)
    _store.iteration[c] = t
    if smp.large:
        _store.last_large[c] = t


@ti.func
def acceptance(f_cur, f_new):
    """Metropolis–Hastings acceptance probability min(1, f_new / f_cur) of a symmetric proposal
    (1 when the current state has f = 0: any state is better; 0 when the proposal has f = 0)."""
    a = 1.0
    if f_new <= 0.0:
        a = 0.0
    elif f_cur > 0.0:
        a = ti.min(1.0, f_new / f_cur)
    return a
