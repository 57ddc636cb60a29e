"""Output paths checked before any work starts, and write failures reported as one line.

``check_output_dir`` is called by the CLI (and the optimiser) before Taichi starts: the folder
must be a folder (not an existing file), creatable and writable (a read-only file system is found
here, not after a long render), and the files that will be written into it must not be folders.
``write_outputs`` turns an OSError while writing (a full device, a folder removed meanwhile) into
a ConfigError naming the file.
"""
import os
import tempfile

from ..errors import ConfigError


def check_output_dir(out, key, file=None, names=()):
    """Validated output folder `out` (created if missing); `key`: the flag or config key it came
    from; `names`: files that will be written into it (each must not be a folder)."""
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise ConfigError(f"expected a folder name, got {out!r}", file, key)
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"output folder '{out}' exists and is not a folder", file, key)
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"cannot create output folder '{out}': '{parent}' is a file", file, key)
    try:
        os.makedirs(out, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tirender-write-test-", dir=out)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ConfigError(f"output folder '{out}' is not writable ({e.strerror})", file, key) from None
    for n in names:
        p = os.path.join(out, n)
        if os.path.isdir(p):
            raise ConfigError(f"output file '{p}' exists and is a folder", file, key)
    return out


def write_outputs(fn):
    """Run fn() (which writes files); an OSError becomes one ConfigError line naming the file."""
    try:
        return fn()
    except OSError as e:
        name = e.filename or "output"
        raise ConfigError(f"cannot write ({e.strerror or e})", name) from None
