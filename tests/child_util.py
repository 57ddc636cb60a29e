"""Tests that need another variant run a child process of their own file (a process holds one variant); the
child prints its report as JSON on its last stdout line."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# Taichi's warnings about a kernel (module "taichi": e.g. a plain Python function called in one) fail the child, as
# pyproject.toml's filterwarnings fails the tests of this process
WARNINGS = "error::SyntaxWarning:taichi"


def run_child(script, args, out_dir, timeout=1500, extended=False):
    """Run ``python script *args`` (``extended``: and ``--extended``, the extended lane's checks) from the repository
    root with TIRENDER_TEST_OUT=out_dir (and no TIRENDER_VARIANT: the child chooses its variant) and return its
    JSON report."""
    args = list(args) + (["--extended"] if extended else [])
    env = dict(os.environ, TIRENDER_TEST_OUT=str(out_dir), PYTHONWARNINGS=WARNINGS)
    env.pop("TIRENDER_VARIANT", None)
    proc = subprocess.run([sys.executable, os.path.abspath(script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    return report


def run_f64_child(module, function, variant, out_dir, timeout=900):
    """``module.function(out_dir)`` (a test module in tests/) in a child process of `variant` whose kernels run
    in float64 (Taichi initialised with fp='f64' before the module is imported); its JSON-able return value."""
    env = dict(os.environ, TIRENDER_VARIANT=variant, PYTHONWARNINGS=WARNINGS)
    env.pop("TIRENDER_FP", None)
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); import json, %s as t; print(json.dumps(t.%s(%r)))"
            % (ROOT, here, module, function, str(out_dir)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(report)
    return report


def start_f64_script(script, argv):
    """``python script *argv`` as __main__ in a float64 child (Taichi initialised with fp='f64' before tirender is
    imported: Taichi freezes `float` in vector and struct types when tirender.core.math creates them), tests/ on
    its path; the Popen, stdout and stderr piped."""
    env = dict(os.environ)
    env.pop("TIRENDER_FP", None)
    script = os.path.abspath(script)
    code = ("import sys, runpy; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); sys.argv = %r; runpy.run_path(%r, run_name='__main__')"
            % (ROOT, os.path.dirname(script), [script, *argv], script))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)


def error_messages(calls, error):
    """The message of the ``error`` each of ``calls`` raises, "no error" where one raises none (a child's report of
    its refusals)."""
    out = []
    for call in calls:
        try:
            call()
            out.append("no error")
        except error as e:
            out.append(str(e))
    return out


_CUDA = []
_CUDA_PROBE = ("import taichi as ti\ntry:\n    ti.init(arch=ti.cuda, enable_fallback=False, offline_cache=False)\n"
               "    ok = ti.lang.impl.current_cfg().arch == ti.cuda\nexcept Exception:\n    ok = False\n"
               "print('CUDA', int(ok))")


def machine_has_cuda():
    """Whether Taichi starts its CUDA backend on this machine (whatever backend the test process itself runs on):
    no CUDA driver library, no CUDA; otherwise a child process asks Taichi itself (once per process)."""
    if not _CUDA:
        from tirender import backend
        ok = False
        if backend.has_cuda_driver():
            r = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=300)
            ok = r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == ["CUDA 1"]
        _CUDA.append(ok)
    return _CUDA[0]
