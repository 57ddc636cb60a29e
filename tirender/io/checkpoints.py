"""Checkpoints: one .npz written atomically (temp file + fsync + rename), so a killed run never
leaves a half-written checkpoint; ``load_checkpoint`` returns None when there is none."""
import io
import os

import numpy as np

from .atomic import atomic_write_bytes


def save_checkpoint(path, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue(), fsync=True)


def load_checkpoint(path):
    if not os.path.exists(path):
        return None
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
