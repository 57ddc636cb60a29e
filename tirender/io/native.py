"""Capturing what native (C/C++) image libraries print on the process's stdout/stderr, so that a bad file is
reported as one ConfigError line instead of leaking the library's own diagnostics onto the terminal."""
import contextlib
import io
import os
import sys
import tempfile

__all__ = ["captured_native_output", "one_line"]


def _flush_c_stdio():
    """fflush(NULL): the libraries' C/C++ streams write through C stdio buffers."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no libc handle (not Linux/macOS): nothing to flush
        pass


@contextlib.contextmanager
def captured_native_output(sink):
    """Redirect file descriptors 1 and 2 (where C/C++ libraries print their diagnostics) into a
    temporary file, and sys.stdout/sys.stderr into a string, for the duration of the block; the
    text is appended to ``sink`` (a list)."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # noqa: BLE001 - a closed/odd stream: nothing to flush
            pass
    saved = []
    with tempfile.TemporaryFile() as tmp:
        try:
            for fd in (1, 2):
                saved.append((fd, os.dup(fd)))
                os.dup2(tmp.fileno(), fd)
        except OSError:                                   # no such descriptors: don't redirect
            pass
        py_out = io.StringIO()          # pybind11's py::print writes to sys.stdout
        try:
            with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_out):
                yield
        finally:
            _flush_c_stdio()
            for fd, old in saved:
                os.dup2(old, fd)
                os.close(old)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace") + py_out.getvalue())


def one_line(text, path=None, limit=200):
    """A library message as one short line: whitespace folded, the file's own name (which the
    ConfigError already leads with) and surrounding quotes/parentheses left out."""
    t = " ".join(str(text).split())
    if path:
        for p in (f'("{path}")', f'"{path}":', f'"{path}"', f"({path})", f"{path}:", str(path)):
            t = t.replace(p, "")
        t = " ".join(t.split())
    return t[:limit].strip(" :") or "unknown error"
