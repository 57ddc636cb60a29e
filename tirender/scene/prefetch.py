"""A large scene's mesh files read in a forked child process while the parent compiles.

Loading a scene of many mesh files (Mitsuba's lego tutorial scene: 439 PLY files, 2 M triangles) has two
independent pieces of work that each take a CPU: reading the files and placing their triangles in the world
(numpy, :meth:`~tirender.scene.description._Builder.shape_geometry`), and loading the BVH build's kernels into the
process (Taichi re-traces them and generates machine code, ~0.6 s, holding the GIL: a thread cannot overlap it).
:func:`mesh_geometries` forks a child that computes the geometry of every mesh-file shape and sends it back
through a pipe (pickle protocol 5, the arrays' bytes out of band) while the parent runs ``meanwhile`` (the
kernels' first calls); the parent then describes the scene as before, taking each shape's geometry from the
child's result. The result is the same as a serial load's (the same function on the same input); the child
computes only what is pure numpy (no Taichi, no image library with its own threads), turns warnings into errors,
and leaves out any shape it could not do: the parent computes those itself, with its ConfigError or warning.

Only on Linux (``os.fork``), only when there is work to overlap (``meanwhile``) and at least ``MIN_BYTES`` of mesh
files; ``TIRENDER_PREFETCH=0`` turns it off. A child that fails or dies costs only the time it took, one that has
not answered within ``WAIT_S`` + ``WAIT_S_PER_BYTE`` x the files' size (forking copies one thread: a lock another
thread held at that moment would stay held in the child) is killed: the parent then computes every shape itself.
"""
import os
import pickle
import select
import signal
import sys
import warnings

from ..errors import ConfigError

__all__ = ["MIN_BYTES", "enabled", "mesh_geometries"]

MIN_BYTES = 4 << 20          # mesh files smaller than this in all are read by the parent (a fork costs ~10 ms)
WAIT_S = 5.0                 # the longest wait for the child's answer beyond WAIT_S_PER_BYTE x the files' size
WAIT_S_PER_BYTE = 1e-7       # (the lego scene: 87 MB of PLY files, 0.5-0.7 s in the child on this machine)


def enabled():
    """Whether a forked reader may be used here (Linux, not turned off by TIRENDER_PREFETCH=0)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and os.environ.get("TIRENDER_PREFETCH") != "0"


def _file_bytes(builder, todo):
    """The total size of the files the shapes todo ({j: (i, spec)}) read, each file once (0 for a missing one)."""
    sizes = {}
    for _, spec in todo.values():
        try:
            path = builder.path(spec.get("filename"), "")
            sizes[path] = os.path.getsize(path)
        except (ConfigError, OSError):
            pass
    return sum(sizes.values())


def mesh_geometries(builder, todo, meanwhile):
    """{j: builder.shape_geometry(i, spec)} for the mesh-file shapes ``todo`` ({j: (i, spec)}), computed by a forked
    child while this process runs ``meanwhile()``; {} (and ``meanwhile`` not run) when it would not pay: no
    ``meanwhile``, files of less than MIN_BYTES, not Linux. Shapes the child could not do are missing."""
    if meanwhile is None or not todo or not enabled():
        return {}
    size = _file_bytes(builder, todo)
    if size < MIN_BYTES:
        return {}
    child = _Child(lambda: _geometries(builder, todo))
    try:
        meanwhile()
        return child.result(WAIT_S + WAIT_S_PER_BYTE * size) or {}
    finally:
        child.reap()


def _geometries(builder, todo):
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a warning: the parent recomputes the shape and issues it
        for j, (i, spec) in todo.items():
            try:
                out[j] = builder.shape_geometry(i, spec)
            except Exception:                   # the parent raises it, with the serial load's message
                pass
    return out


class _Child:
    """fn() run in a forked child; :meth:`result` is its return value (None if it failed)."""

    def __init__(self, fn):
        r, w = os.pipe()
        with warnings.catch_warnings():
            # Python >= 3.12 warns of forking a process with threads (Taichi's); the child runs numpy only
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:                            # the child: never returns
            code = 1
            try:
                os.close(r)
                _send(w, fn())
                code = 0
            except BaseException:
                pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def result(self, timeout):
        """fn()'s value, or None when the child failed or sent nothing within ``timeout`` seconds."""
        try:
            if not select.select([self.fd], [], [], timeout)[0]:
                return None                     # reap() kills it
            with os.fdopen(self.fd, "rb", closefd=True) as f:
                self.fd = None
                return _receive(f)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError):
            return None

    def reap(self):
        """Wait for the child (killing it if its result was not read)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _send(fd, obj):
    """obj through the pipe: header (sizes), the pickle, then each array's bytes (pickle protocol 5 out of band)."""
    bufs = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    head = pickle.dumps([len(data)] + [r.nbytes for r in raws])
    with os.fdopen(fd, "wb", buffering=1 << 20) as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        f.write(data)
        for r in raws:
            f.write(r)


def _exact(f, n):
    b = bytearray(n)
    view, got = memoryview(b), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise EOFError("the reader ended early")
        got += k
    return b


def _receive(f):
    n = int.from_bytes(_exact(f, 8), "little")
    sizes = pickle.loads(_exact(f, n))
    data = _exact(f, sizes[0])
    return pickle.loads(data, buffers=[_exact(f, s) for s in sizes[1:]])
