"""Checkpoints: one .npz written atomically (temp file + fsync + rename), so a killed run never
leaves a half-written checkpoint; ``load_checkpoint`` returns None when there is none and raises
ConfigError naming the file when it is empty, corrupt or lacks a required array."""
import io
import os

import numpy as np

from ..errors import ConfigError
from .atomic import atomic_write_bytes


def save_checkpoint(path, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue(), fsync=True)


def load_checkpoint(path, required=()):
    """{name: array} of the checkpoint at `path`, None when there is none; `required`: array names
    that must be present (ConfigError naming the file otherwise, as for unreadable files)."""
    if not os.path.exists(path):
        return None
    if os.path.isdir(path):
        raise ConfigError("checkpoint is a folder, expected an .npz file", path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("not an .npz archive")
            out = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - any failure to read it is a corrupt checkpoint
        why = "empty file" if os.path.getsize(path) == 0 else f"{type(e).__name__}: {e}"
        raise ConfigError(f"corrupt checkpoint ({why}); delete it to start from scratch", path) from None
    missing = [k for k in required if k not in out]
    if missing:
        raise ConfigError(f"incomplete checkpoint: missing {', '.join(missing)}; delete it to start from scratch",
                          path)
    return out


def load_npy(path, what="array"):
    """A cached .npy array; ConfigError naming the file when it is unreadable (truncated, garbage)."""
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"corrupt {what} ({type(e).__name__}: {e}); delete it to recompute it", path) from None


def save_npy(path, a):
    """np.save, atomically (a reader or a resumed run never sees half an array)."""
    buf = io.BytesIO()
    np.save(buf, a)
    atomic_write_bytes(path, buf.getvalue())
