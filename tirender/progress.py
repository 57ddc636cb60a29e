"""A small terminal progress bar (no dependency): ``with Progress(total, "render") as p: p.update(n)``."""
import sys
import time


class Progress:
    """Shows `label [#####.....] i/total  rate  eta` on stderr when the work lasts more than
    `delay` seconds (and stderr is a terminal, unless force=True). `postfix` adds text (e.g. loss)."""

    def __init__(self, total, label="", unit="it", delay=2.0, force=False, stream=None):
        self.total, self.label, self.unit = max(total, 1), label, unit
        self.stream = stream or sys.stderr
        self.enabled = force or getattr(self.stream, "isatty", lambda: False)()
        self.delay = delay
        self.n = 0
        self.t0 = time.perf_counter()
        self.postfix = ""
        self._shown = False

    def update(self, k=1, postfix=None):
        self.n += k
        if postfix is not None:
            self.postfix = postfix
        el = time.perf_counter() - self.t0
        if self.enabled and (el > self.delay or self._shown):
            self._draw(el)

    def _draw(self, el):
        frac = min(self.n / self.total, 1.0)
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        rate = self.n / el if el > 0 else 0.0
        eta = (self.total - self.n) / rate if rate > 0 else 0.0
        speed = f"{rate:.2f} {self.unit}/s" if rate >= 1 else f"{1 / rate if rate else 0:.2f} s/{self.unit}"
        self.stream.write(f"\r{self.label} [{bar}] {self.n}/{self.total} {speed} eta {eta:.0f}s {self.postfix}  ")
        self.stream.flush()
        self._shown = True

    def __enter__(self):
        return self

    def __exit__(self, *a):
        if self._shown:
            self._draw(time.perf_counter() - self.t0)
            self.stream.write("\n")
            self.stream.flush()
