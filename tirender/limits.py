"""Memory limits: every large input (texture, mesh, grid, film) is checked before it is allocated.

The limit is, in order: ``set_max_memory`` (the CLI's ``--max-memory``), the environment variable
``TIRENDER_MAX_MEMORY`` (bytes, or a number with a K/M/G/T suffix, powers of 1024), or half the
machine's physical memory. ``check(values, what, file, key)`` estimates what an input of
``values`` float32 numbers costs once it is in the scene — the host array, the device pool and its
gradient twin (float + 64-bit fixed point), the optimiser's two moments and transient copies while
loading (``COPIES`` = 8 times the raw size) — and raises ConfigError naming the input, its size and
the limit when the estimate exceeds the limit.
"""
import os

from .errors import ConfigError

COPIES = 8          # live copies of a parameter's float32 values (see the module docstring)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_state = {"limit": None, "source": None}


def parse_size(text, key):
    """"8G", "512M", "1.5G", "1073741824" -> bytes (int > 0); ConfigError naming `key` otherwise."""
    s = str(text).strip().upper().removesuffix("IB").removesuffix("B") if isinstance(text, str) else text
    if isinstance(s, str):
        unit = s[-1:] if s[-1:] in _UNITS else ""
        num = s[:-1] if unit else s
        try:
            v = float(num) * _UNITS[unit]
        except ValueError:
            v = -1.0
    elif isinstance(s, (int, float)) and not isinstance(s, bool):
        v = float(s)
    else:
        v = -1.0
    if not v > 0 or v != v or v == float("inf"):
        raise ConfigError(f"expected a memory size such as 8G, 512M or a number of bytes, got {text!r}", key=key)
    return int(v)


def physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def set_max_memory(text, key="--max-memory"):
    """Set the limit for this process (None: back to the environment / default)."""
    _state["limit"] = None if text is None else parse_size(text, key)
    _state["source"] = None if text is None else key


def max_memory():
    """(limit in bytes, where it comes from)."""
    if _state["limit"] is not None:
        return _state["limit"], _state["source"]
    env = os.environ.get("TIRENDER_MAX_MEMORY")
    if env:
        return parse_size(env, "TIRENDER_MAX_MEMORY"), "TIRENDER_MAX_MEMORY"
    return physical_memory() // 2, "default: half the physical memory"


def fmt_bytes(n):
    for unit, div in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def check(values, what, file=None, key=None, copies=COPIES, bytes_per_value=4):
    """Refuse an input of `values` numbers (float32 unless `bytes_per_value` says otherwise) whose
    estimated footprint (`copies` × raw size) exceeds the memory limit; returns the estimate."""
    raw = int(values) * bytes_per_value
    need = raw * copies
    limit, source = max_memory()
    if need > limit:
        raise ConfigError(f"{what} needs about {fmt_bytes(need)} ({fmt_bytes(raw)} of data, ~{copies} copies while "
                          f"rendering and optimising), more than the memory limit of {fmt_bytes(limit)} ({source}; "
                          f"raise it with --max-memory or TIRENDER_MAX_MEMORY)", file, key)
    return need


def load_npy(path, ndims, what):
    """A numeric .npy array of `ndims` dimensions (a tuple of accepted counts) as float32, its size
    checked against the limit before it is read; every problem is a ConfigError naming `path`."""
    import numpy as np
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any numpy failure is bad input
        raise ConfigError(f"cannot read array ({type(e).__name__}: {e})", path) from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub" or a.ndim not in ndims:
        shape = getattr(a, "shape", None)
        dims = " or ".join(f"{n}-D" for n in ndims)
        raise ConfigError(f"{what} must be a {dims} numeric array, got {getattr(a, 'dtype', type(a).__name__)} "
                          f"of shape {shape}", path)
    check(a.size, f"{what} of shape {a.shape}", path)
    try:
        return np.array(a, np.float32)
    except (ValueError, OSError) as e:
        raise ConfigError(f"cannot read array ({e})", path) from None
