"""PCG32 random number streams (O'Neill 2014), seeded from (seed, pixel, sample index).

A path's random numbers depend only on (seed, pixel, sample index): re-seeding with the
same triple replays the path exactly, which Path Replay Backpropagation relies on.
"""
import taichi as ti

PCG_MULT = 6364136223846793005
PCG_INIT_STATE = 0x853C49E6748FEA9B


@ti.func
def mix32(x):
    """32-bit integer hash (lowbias32, C. Wellons)."""
    x ^= x >> ti.u32(16)
    x *= ti.u32(0x7FEB352D)
    x ^= x >> ti.u32(15)
    x *= ti.u32(0x846CA68B)
    x ^= x >> ti.u32(16)
    return x


@ti.func
def hash_u32(seed, a, b, c):
    """A 32-bit hash of four integers (chained lowbias32): the counter-based random numbers of
    core/pss.py, a pure function of its arguments."""
    h = mix32(ti.cast(seed, ti.u32) + ti.u32(0x9E3779B9))
    h = mix32(h ^ ti.cast(a, ti.u32))
    h = mix32(h ^ ti.cast(b, ti.u32))
    return mix32(h ^ ti.cast(c, ti.u32))


@ti.func
def pair(sampler: ti.template()):
    """Two numbers of any sampler's ``next_1d`` as a 2-vector: every sampler's ``next_2d`` (a runtime loop: one
    ``next_1d`` inlined, which matters for MCMC's primary-sample-space sampler)."""
    v = ti.Vector([0.0, 0.0], dt=float)
    for j in range(2):
        v[j] = sampler.next_1d()
    return v


@ti.dataclass
class PCG32:
    state: ti.u64
    inc: ti.u64

    @ti.func
    def seed(self, initstate, initseq):
        self.state = ti.u64(0)
        self.inc = (initseq << ti.u64(1)) | ti.u64(1)
        self.next_u32()
        self.state += initstate
        self.next_u32()

    @ti.func
    def next_u32(self):
        old = self.state
        self.state = old * ti.u64(PCG_MULT) + self.inc
        xs = ti.u32(((old >> ti.u64(18)) ^ old) >> ti.u64(27))
        rot = ti.u32(old >> ti.u64(59))
        return (xs >> rot) | (xs << ((~rot + ti.u32(1)) & ti.u32(31)))

    @ti.func
    def next_1d(self):
        """Uniform float in [0, 1) with 24 random bits."""
        return ti.cast(self.next_u32() >> ti.u32(8), float) * (1.0 / 16777216.0)

    @ti.func
    def next_2d(self):
        return pair(self)

    @ti.func
    def copy(self):
        """The stream at its current position (a replay reads the same numbers from it)."""
        return PCG32(state=self.state, inc=self.inc)


@ti.func
def make_sampler(seed, pixel, sample):
    """Stream for (seed, pixel index, sample index): stream id from (seed, pixel), offset from sample."""
    s = ti.cast(seed, ti.u32)
    p = ti.cast(pixel, ti.u32)
    seq = (ti.cast(mix32(p ^ mix32(s + ti.u32(0x9E3779B9))), ti.u64) << ti.u64(32)) | ti.cast(
        mix32(p + ti.u32(0x68E31DA4)), ti.u64)
    st = (ti.cast(mix32(ti.cast(sample, ti.u32) ^ mix32(s)), ti.u64) << ti.u64(32)) | ti.cast(
        ti.cast(sample, ti.u32), ti.u64)
    r = PCG32(state=ti.u64(0), inc=ti.u64(1))
    r.seed(st + ti.u64(PCG_INIT_STATE), seq)
    return r
