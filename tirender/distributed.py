"""Scale-out on Ray: the views of a multi-view ``tirender optimize`` sharded over N workers.

    tirender optimize configs/volume_recovery.yaml --workers 2                 # a local Ray instance
    tirender optimize configs/volume_recovery.yaml --workers 8 --address HOST:6379   # a running cluster

Each worker is a Ray actor with its own Taichi runtime (the driver's backend) and its own copy of
the scene, built from the same loaded config (its files are read at the same paths on every
machine: a shared file system, as usual on a Ray cluster). Per iteration the driver puts the
optimised parameters' values in Ray's object store once (float32; every worker fetches them), sends
each worker its views (optim/views.py ``ViewTask``; a view's target image travels with its first
task to a worker) and gets back, per view, the loss, the image and the float64 gradients of the
optimised parameters. The driver adds them in view order (``views.combine``), steps its optimiser,
checkpoints and renders what it saves. Since a view's result is a pure function of (parameter
values, iteration, view) on a backend, the run is **bit-identical** to the single-process run and
to any other number of workers (tests/test_distributed.py).

Failures: a worker that dies (process killed, machine lost) makes its pending views fail on the
driver; they are reassigned to the live workers, a replacement worker is started for the next
iterations, and the lost views are recomputed — a lost view's result is the same function of the
same inputs, so the iteration's result is unchanged. A killed driver resumes from its checkpoint
(``--resume``), with new workers. Bytes moved per iteration: docs/scale_out.md.
"""
import contextlib
import os
import sys

from .errors import ConfigError, TirenderError

# environment variables that change what a worker computes or how: passed on to every worker
_ENV_PREFIX = "TIRENDER_"
MAX_FAILURES_PER_WORKER = 3


def require_ray(key="--workers"):
    """Import Ray, or a ConfigError naming the flag and the install command."""
    try:
        import ray
    except ImportError:
        raise ConfigError("needs Ray, which is not installed (pip install \"tirender[distributed]\")",
                          key=key) from None
    return ray


def _failure_types(ray):
    ex = ray.exceptions
    return tuple(getattr(ex, n) for n in ("RayActorError", "WorkerCrashedError", "ActorUnavailableError",
                                          "ObjectLostError", "NodeDiedError") if hasattr(ex, n))


class ViewWorker:
    """One worker (a Ray actor): a Taichi runtime and a scene; evaluates the views it is sent."""

    def __init__(self, cfg, arch, threads, index, env):
        os.environ.update(env)   # the driver's TIRENDER_* settings, before tirender's modules read them
        from . import backend
        from .api import scene_from_config
        self.targets, self.index, self.error = {}, index, None
        self.held = {}           # (iteration, view) -> name -> float64 gradient, between the phases
        # test hook "index:iteration:phase[,...]" (phase evaluate|reduce): this worker dies in that phase
        self.kill_at, self.kill_phase = -1, None
        for spec in os.environ.get("TIRENDER_TEST_KILL_WORKER", "").split(","):
            kill = spec.split(":")
            if len(kill) == 3 and int(kill[0]) == index:
                self.kill_at, self.kill_phase = int(kill[1]), kill[2]
        try:   # an error here (a scene file missing on this machine) is raised by ready(), as a task error
            backend.init(arch, **({} if threads is None else {"cpu_max_num_threads": int(threads)}))
            self.scene = scene_from_config(cfg)
        except Exception as e:   # noqa: BLE001
            self.error = e

    def ready(self):
        """This worker's process id, once its scene is built (or the error that prevented it)."""
        if self.error is not None:
            raise self.error
        return os.getpid()

    def evaluate(self, params, tasks):
        """Phase 1. params: name -> float32 array (the optimised parameters' values); tasks:
        [(ViewTask, target image or None if sent before)]. Returns [ViewResult] in the tasks' order,
        without their gradients: they stay here for ``reduce``."""
        from .optim.views import evaluate_view, set_params
        set_params(self.scene, params)
        if tasks:   # gradients held from earlier iterations are stale
            self.held = {k: g for k, g in self.held.items() if k[0] == tasks[0][0].it}
        out = []
        for task, target in tasks:
            if target is not None:
                self.targets[task.view] = target
            if task.it == self.kill_at and self.kill_phase == "evaluate" and out:
                os._exit(1)
            r = evaluate_view(self.scene, task, self.targets[task.view])
            self.held[(task.it, task.view)], r.grads = r.grads, {}
            out.append(r)
        return out

    def reduce(self, it, views, scales):
        """Phase 2: Σ over `views` (held since phase 1 of iteration `it`) of round(g_v · S) (int64)."""
        from .optim.views import quantized_sum
        if it == self.kill_at and self.kill_phase == "reduce":
            os._exit(1)
        return quantized_sum([self.held.pop((it, v)) for v in views], scales)


class WorkerPool(contextlib.AbstractContextManager):   # __enter__: self
    """N Ray workers evaluating the views of an optimisation (the interface of views.LocalViews).

    cfg: the loaded config (tirender.config.load_config); targets: view -> float32 (H, W, 3);
    address: a running Ray cluster (None: start a local Ray instance for this run); threads: Taichi
    CPU threads per worker (default: this machine's cores / N on a local instance, else Taichi's)."""

    def __init__(self, cfg, targets, n, address=None, threads=None):
        from . import backend
        ray = require_ray()
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"must be an integer >= 1, got {n!r}", key="--workers")
        self.ray = ray
        self.failures = _failure_types(ray)
        self.cfg, self.targets, self.arch = cfg, targets, backend.ensure_init()
        cores = os.cpu_count() or 1
        if threads is None and address is None:
            threads = max(1, cores // n)
        self.threads = threads
        self.started_ray = False
        if not ray.is_initialized():
            import logging
            kw = dict(logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
            try:
                if address is None:
                    ray.init(num_cpus=max(cores, n * (threads or 1)), **kw)
                else:
                    ray.init(address=address, **kw)
            except Exception as e:   # noqa: BLE001  (Ray raises ConnectionError, RuntimeError, ValueError, ...)
                raise ConfigError(f"cannot start or reach Ray: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                                  key="--address" if address else "--workers") from None
            self.started_ray = True
        self.env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIX)}
        self._actor_cls = ray.remote(ViewWorker).options(num_cpus=threads or 1, max_restarts=0, max_task_retries=0)
        self._cfg_ref = ray.put(cfg)
        self.workers = {}        # index -> actor handle
        self.sent = {}           # index -> views whose target that worker holds
        self.assign = {}         # view -> worker index
        self.next_index = 0
        self.lost = 0
        for _ in range(n):
            self._start()
        self.pids = {}
        for i, w in self.workers.items():
            try:
                self.pids[i] = ray.get(w.ready.remote())
            except ray.exceptions.RayTaskError as e:
                self.close()
                self._reraise(e)
        for k, v in enumerate(sorted(targets)):
            self.assign[v] = sorted(self.workers)[k % n]

    def _start(self):
        i = self.next_index
        self.next_index += 1
        self.workers[i] = self._actor_cls.remote(self._cfg_ref, self.arch, self.threads, i, self.env)
        self.sent[i] = set()
        return i

    def _reraise(self, e):
        """A worker's own exception: tirender errors as themselves (one line), others as they came."""
        cause = getattr(e, "cause", None)
        if isinstance(cause, TirenderError):
            raise cause from None
        raise e

    def _lose(self, i):
        """Worker i died: forget it, start a replacement, move its views round-robin over the live ones."""
        self.lost += 1
        if self.lost > MAX_FAILURES_PER_WORKER * max(len(self.workers), 1):
            raise TirenderError(f"{self.lost} worker failures: giving up (see the Ray logs)")
        self.workers.pop(i, None)
        self.sent.pop(i, None)
        self._start()
        live = sorted(self.workers)
        moved = [v for v, w in sorted(self.assign.items()) if w == i]
        for k, v in enumerate(moved):
            self.assign[v] = live[k % len(live)]
        print(f"tirender: worker {i} was lost; its views {moved} are reassigned and recomputed "
              f"(replacement worker {live[-1]})", file=sys.stderr)

    def evaluate(self, tasks, params):
        """(ViewResults of `tasks` in their order, {name: float64 gradient summed over them});
        params(): name -> array of the optimised values. Two phases (optim/views.py): the views'
        results and maxima, then the workers' exact int64 partial sums at the common scales."""
        from .optim.views import add_quantized, dequantize, gradient_scales
        ref = self.ray.put(params())
        results, holder = self._phase1(ref, tasks)
        scales = gradient_scales([results[t.view] for t in tasks], len(tasks))
        it = tasks[0].it if tasks else 0
        total = {}
        todo = [t for t in tasks]
        while todo:
            by_worker = {}
            for t in todo:
                by_worker.setdefault(holder[t.view], []).append(t)
            pending = {self.workers[i].reduce.remote(it, [t.view for t in ts], scales): (i, ts)
                       for i, ts in by_worker.items()}
            todo = []
            for ref_q, (i, ts) in pending.items():
                try:
                    total = add_quantized(total, self.ray.get(ref_q))
                except self.failures:
                    if i in self.workers:
                        self._lose(i)
                    _, where = self._phase1(ref, ts)   # recomputed elsewhere: the same results
                    holder.update(where)
                    todo.extend(ts)
                except self.ray.exceptions.RayTaskError as e:
                    self._reraise(e)
        return [results[t.view] for t in tasks], dequantize(total, scales)

    def _phase1(self, ref, tasks):
        """Every task's ViewResult (reassigning the views of workers that die): ({view: result},
        {view: index of the worker holding its gradients})."""
        ray = self.ray
        todo = list(tasks)
        results, holder = {}, {}
        while todo:
            pending = {}
            by_worker = {}
            for t in todo:
                by_worker.setdefault(self.assign[t.view], []).append(t)
            for i, ts in by_worker.items():
                items = [(t, None if t.view in self.sent[i] else self.targets[t.view]) for t in ts]
                pending[self.workers[i].evaluate.remote(ref, items)] = (i, ts)
            todo = []
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                i, ts = pending.pop(done[0])
                try:
                    out = ray.get(done[0])
                except self.failures:
                    if i in self.workers:
                        self._lose(i)
                    todo.extend(ts)
                    continue
                except ray.exceptions.RayTaskError as e:
                    self._reraise(e)
                self.sent[i].update(t.view for t in ts)
                results.update((r.view, r) for r in out)
                holder.update((t.view, i) for t in ts)
        return results, holder

    def close(self):
        for w in self.workers.values():
            try:
                self.ray.kill(w)
            except Exception:   # noqa: BLE001  (already gone)
                pass
        self.workers = {}
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False

    def __exit__(self, *exc):
        self.close()
