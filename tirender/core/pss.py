"""Primary sample space: the state of Markov chains over the random numbers of a path (Kelemen et
al. 2002; the lazy mutations of pbrt-v3's MLTSampler), read by the walk through the same
``next_1d`` / ``next_2d`` interface as the PCG32 stream (core/rng.py).

A chain's state is a vector u ∈ [0, 1)^∞ of primary samples; dimension d is the d-th number the
path reads (0, 1: the film position). The first ``MAX_DIMS`` dimensions are stored per chain
(``ChainStore``); later ones are drawn afresh at every read (an independence proposal for them,
symmetric, so Metropolis–Hastings stays exact for paths of any length).

Mutations (``PssSampler`` in mode MUTATE) are lazy: a dimension is mutated when it is read, by a
large step (a fresh uniform number, with probability ``large_step`` per iteration) or by the
accumulated small steps since it was last touched (a wrapped symmetric offset of std σ·sqrt(n):
any symmetric proposal keeps Metropolis–Hastings exact, and a triangular one is cheaper than the
normal of pbrt-v3); a reject
restores every dimension touched in the iteration. Dimensions first read after the chain started
take a uniform value for the current state before they are mutated.

Coherent bundles (Nimier-David et al. 2019 §4.2): with ``kernel`` σ_G > 0 every read returns
frac(u_d − δ), δ ~ N(0, σ_G²) drawn afresh per read, so the B paths of a bundle read the same
centre u with independent Gaussian offsets — an unbiased estimate of the convolution G ∗ f.

Modes: BOOTSTRAP (every read a fresh uniform from the stream, nothing stored), INIT (the same, and
stored as the chain's state), HOLD (read the stored state, no mutation), MUTATE (see above).
"""
import math

import taichi as ti

from .rng import PCG32

MAX_DIMS = 64
BUNDLE_MAX = 16
BOOTSTRAP, INIT, HOLD, MUTATE = 0, 1, 2, 3
_ONE_MINUS = 0.99999994   # largest float32 below 1


class ChainStore:
    """Per-chain fields (capacity ``chains``): u (value), the iteration of its last change (mod),
    their backups for a reject, the number of stored dimensions (used), the iteration counters,
    the mutation stream, and the current bundle's estimate f̂, film positions and radiances."""

    def __init__(self, chains):
        self.chains = chains
        self.value = ti.field(ti.f32, shape=(chains, MAX_DIMS))
        self.backup = ti.field(ti.f32, shape=(chains, MAX_DIMS))
        self.mod = ti.field(ti.i32, shape=(chains, MAX_DIMS))
        self.backup_mod = ti.field(ti.i32, shape=(chains, MAX_DIMS))
        self.used = ti.field(ti.i32, shape=chains)
        self.iteration = ti.field(ti.i32, shape=chains)
        self.last_large = ti.field(ti.i32, shape=chains)
        self.rng_state = ti.field(ti.u64, shape=chains)
        self.rng_inc = ti.field(ti.u64, shape=chains)
        self.f_cur = ti.field(ti.f32, shape=chains)
        self.pos = ti.Vector.field(2, ti.f32, shape=(chains, BUNDLE_MAX))
        self.L = ti.Vector.field(3, ti.f32, shape=(chains, BUNDLE_MAX))
        self.new_pos = ti.Vector.field(2, ti.f32, shape=(chains, BUNDLE_MAX))
        self.new_L = ti.Vector.field(3, ti.f32, shape=(chains, BUNDLE_MAX))
        # f̂ of the large-step proposals (uniform states: unbiased for the normalisation b), their count
        self.large_f = ti.field(ti.f32, shape=chains)
        self.large_n = ti.field(ti.i32, shape=chains)
        # statistics since the last reset: accepted proposals, Σ_b n_b and B · max_b n_b (lane use)
        self.accepted = ti.field(ti.i64, shape=chains)
        self.lanes_busy = ti.field(ti.i64, shape=chains)
        self.lanes_total = ti.field(ti.i64, shape=chains)


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


def generation():
    """Changes whenever ``store`` allocates new fields (a cache key for kernels that use them)."""
    return _generation


@ti.func
def _frac(x):
    y = x - ti.floor(x)
    return ti.min(y, _ONE_MINUS)


@ti.dataclass
class PssSampler:
    """A path's view of chain ``chain``'s primary samples (see the module doc). dim: the next
    dimension; iteration / last_large / large: the chain's counters and whether this iteration is
    a large step; sigma: small-step std; kernel: the bundle offsets' std σ_G (0: none); state /
    inc: the mutation stream (PCG32); spare / has_spare: Box–Muller's second normal."""
    chain: ti.i32
    dim: ti.i32
    mode: ti.i32
    iteration: ti.i32
    last_large: ti.i32
    large: ti.i32
    sigma: ti.f32
    kernel: ti.f32
    state: ti.u64
    inc: ti.u64
    spare: ti.f32
    has_spare: ti.i32

    @ti.func
    def uniform(self):
        """A number of the mutation stream, uniform in [0, 1)."""
        r = PCG32(state=self.state, inc=self.inc)
        u = r.next_1d()
        self.state = r.state
        return u

    @ti.func
    def normal(self):
        """A standard normal number (Box–Muller; the pair's second number is kept for the next call)."""
        z = self.spare
        if self.has_spare == 0:
            u1 = self.uniform()
            u2 = self.uniform()
            r = ti.sqrt(-2.0 * ti.log(1.0 - u1))
            z = r * ti.cos(2.0 * math.pi * u2)
            self.spare = r * ti.sin(2.0 * math.pi * u2)
            self.has_spare = 1
        else:
            self.has_spare = 0
        return z

    @ti.func
    def symmetric(self):
        """A small-step offset of unit variance: triangular (u1 - u2)·√6 — symmetric, which is all a
        Metropolis proposal needs, and cheaper than a normal."""
        return (self.uniform() - self.uniform()) * 2.449489742783178

    @ti.func
    def next_1d(self):
        d = self.dim
        self.dim += 1
        u = 0.0
        if self.mode == BOOTSTRAP or d >= MAX_DIMS:
            u = self.uniform()
        elif self.mode == INIT:
            u = self.uniform()
            _store.value[self.chain, d] = u
            _store.mod[self.chain, d] = self.iteration
            _store.used[self.chain] = d + 1
        else:
            c = self.chain
            v = 0.0
            mod = 0
            if d >= _store.used[c]:     # first read: the current state's value, uniform
                v = self.uniform()
                mod = self.iteration - 1 if self.mode == MUTATE else self.iteration
                _store.used[c] = d + 1
            else:
                v = _store.value[c, d]
                mod = _store.mod[c, d]
            if self.mode == MUTATE:
                if mod < self.last_large:   # a large step was accepted since: uniform
                    v = self.uniform()
                    mod = self.last_large
                if mod != self.iteration:   # first read in this iteration: mutate
                    _store.backup[c, d] = v
                    _store.backup_mod[c, d] = mod
                    if self.large:
                        v = self.uniform()
                    else:
                        n = ti.cast(self.iteration - mod, ti.f32)
                        v = _frac(v + self.symmetric() * self.sigma * ti.sqrt(n))
                    mod = self.iteration
            _store.value[c, d] = v
            _store.mod[c, d] = mod
            u = v
        if self.kernel > 0.0:
            u = _frac(u - self.kernel * self.normal())
        return u

    @ti.func
    def next_2d(self):
        a = self.next_1d()
        b = self.next_1d()
        return ti.Vector([a, b], dt=float)

    @ti.func
    def copy(self):
        return PssSampler(chain=self.chain, dim=self.dim, mode=self.mode, iteration=self.iteration,
                          last_large=self.last_large, large=self.large, sigma=self.sigma, kernel=self.kernel,
                          state=self.state, inc=self.inc, spare=self.spare, has_spare=self.has_spare)


@ti.func
def load(c, mode, sigma, kernel):
    """Chain c's sampler (counters and stream from the store)."""
    return PssSampler(chain=c, dim=0, mode=mode, iteration=_store.iteration[c], last_large=_store.last_large[c],
                      large=0, sigma=sigma, kernel=kernel, state=_store.rng_state[c], inc=_store.rng_inc[c])


@ti.func
def save(smp):
    """Write the sampler's counters and stream back to its chain."""
    c = smp.chain
    _store.iteration[c] = smp.iteration
    _store.last_large[c] = smp.last_large
    _store.rng_state[c] = smp.state
    _store.rng_inc[c] = smp.inc


@ti.func
def start_iteration(smp: ti.template(), large_step):
    """Begin a proposal: the next iteration, a large step with probability large_step."""
    smp.iteration += 1
    smp.large = 1 if smp.uniform() < large_step else 0


@ti.func
def accept(smp: ti.template()):
    if smp.large:
        smp.last_large = smp.iteration


@ti.func
def reject(smp: ti.template()):
    """Restore every dimension the proposal touched, and forget the iteration."""
    c = smp.chain
    for d in range(_store.used[c]):
        if _store.mod[c, d] == smp.iteration:
            _store.value[c, d] = _store.backup[c, d]
            _store.mod[c, d] = _store.backup_mod[c, d]
    smp.iteration -= 1


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


def current():
    """The chain store (None before the first ``store`` call)."""
    return _store
