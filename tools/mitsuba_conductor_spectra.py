"""Generate ``tirender/spectra/conductors.npz``: the measured complex IOR (η, k) of every conductor Mitsuba 3
names, sampled at the CIE table's 95 wavelengths (360–830 nm every 5 nm), for the spectral variant.

    python3 tools/mitsuba_conductor_spectra.py      (needs the mitsuba pip package: its data/ior/*.spd files)

The ``<name>.eta.spd`` / ``<name>.k.spd`` files list (λ nm, value) pairs; Mitsuba interpolates them linearly
and returns 0 outside their range (IrregularSpectrum), and so does this sampling. The files come from
Mitsuba's resources (BSD licence; the data from the luxpop database and Palik's handbook).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tirender.spectra import cie  # noqa: E402


def read_spd(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                a, b = line.split()[:2]
                rows.append((float(a), float(b)))
    rows.sort()
    return np.array(rows)


def sample(spd, lam):
    """Mitsuba's IrregularSpectrum: linear interpolation inside the data's range, 0 outside."""
    v = np.interp(lam, spd[:, 0], spd[:, 1])
    return np.where((lam >= spd[0, 0]) & (lam <= spd[-1, 0]), v, 0.0)


def main():
    import mitsuba
    d = os.path.join(os.path.dirname(mitsuba.__file__), "data", "ior")
    names = sorted(f[:-len(".eta.spd")] for f in os.listdir(d)
                   if f.endswith(".eta.spd") and os.path.exists(os.path.join(d, f[:-len(".eta.spd")] + ".k.spd")))
    data = np.zeros((len(names), cie.N_SAMPLES, 2), np.float32)
    for i, n in enumerate(names):
        data[i, :, 0] = sample(read_spd(os.path.join(d, n + ".eta.spd")), cie.LAMBDA)
        data[i, :, 1] = sample(read_spd(os.path.join(d, n + ".k.spd")), cie.LAMBDA)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tirender", "spectra", "conductors.npz")
    np.savez_compressed(out, names=np.array(names), eta_k=data, source=np.array(f"mitsuba {mitsuba.__version__}"))
    print(f"wrote {os.path.normpath(out)}: {len(names)} materials x {cie.N_SAMPLES} wavelengths")


if __name__ == "__main__":
    main()
