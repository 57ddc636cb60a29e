"""Loss watch: one warning line when an optimisation's loss rises instead of falling.

Two checks, on the per-iteration training loss (whatever it is: an image loss, one view's loss):

* **across a stage change** (a coarse-to-fine upsampling, ``stage_change``): the mean loss of the
  first ``window`` iterations after it (fewer if the stage is shorter) against the mean of the last
  ``window`` before it; a ratio above ``factor`` warns once, naming the change and the settings that
  govern it.
* **over a window**: the mean of the last ``window`` losses against the lowest such mean seen so far;
  above ``factor`` warns once per rise (it re-arms when the mean falls back under factor × best).
  The first two windows after a stage change are the first check's (its evidence and the window
  overlapping it).

A non-finite loss warns at once. Each warning is a dict (``kind``: ``stage_change``, ``window`` or
``not_finite``; ``iteration`` (0-based, the iteration whose loss completed the evidence); ``ratio``;
``setting``; ``message``), appended to :attr:`events` (written to metrics.json as ``warnings``) and
printed through ``log`` as one line. Means over windows average out the loss's noise (Monte Carlo,
one view per iteration): with the defaults (factor 2, 10 iterations) a rise must double the loss.
"""
import math

import numpy as np

from ..errors import ConfigError

DEFAULT_FACTOR = 2.0
DEFAULT_WINDOW = 10


class LossWatch:
    """factor > 1: the rise that warns (ratio of window means); window ≥ 1: iterations averaged;
    settings: {"stage_change": text, "window": text} naming what to look at; log: print-like."""

    def __init__(self, factor=DEFAULT_FACTOR, window=DEFAULT_WINDOW, settings=None, log=print):
        self.factor, self.window, self.log = float(factor), int(window), log
        self.settings = dict(settings or {})
        self.losses = []           # (iteration, loss)
        self.events = []
        self._best = math.inf      # lowest window mean so far
        self._armed = True         # the window check may warn (re-armed when the mean falls back)
        self._pending = []         # stage changes awaiting their after-window: (index into losses, what, before)
        self._last_change = None   # index into losses of the latest stage change

    def stage_change(self, what, setting=None):
        """Mark a stage change before the next loss (what: e.g. "32³ → 64³"); setting: what to look at
        (default: settings["stage_change"])."""
        n = len(self.losses)
        before = [x for _, x in self.losses[max(0, n - self.window):]]
        if self._last_change is not None:   # not across an earlier change
            before = before[max(0, len(before) - (n - self._last_change)):]
        self._last_change = n
        if before:
            self._pending.append((n, what, float(np.mean(before)), len(before),
                                  setting or self.settings.get("stage_change", "")))

    def end_stage(self):
        """The stage ended (maybe before ``window`` iterations): judge pending changes on what there is."""
        self._judge(final=True)

    def update(self, it, loss):
        """Record iteration it's loss; returns the warnings it raised (usually none)."""
        k = len(self.events)
        loss = float(loss)
        if not math.isfinite(loss):
            if not any(e["kind"] == "not_finite" for e in self.events):
                self._warn("not_finite", it, math.inf, self.settings.get("window", ""),
                           f"loss is {loss} at iteration {it}")
            return self.events[k:]
        self.losses.append((int(it), loss))
        self._judge(final=False)
        n = len(self.losses)
        if n >= self.window and (self._last_change is None or n - self._last_change >= 2 * self.window):
            mean = float(np.mean([x for _, x in self.losses[n - self.window:]]))
            if 0 < self._best < mean / self.factor and self._armed:
                first = self.losses[n - self.window][0]
                self._warn("window", it, mean / self._best, self.settings.get("window", ""),
                           f"loss rose {mean / self._best:.3g}x over iterations {first}-{it} (mean {mean:.4g} vs "
                           f"the best {self.window}-iteration mean {self._best:.4g})")
                self._armed = False
            elif mean <= self.factor * self._best:
                self._armed = True
            self._best = min(self._best, mean)
        return self.events[k:]

    def _judge(self, final):
        keep = []
        for start, what, before, nb, setting in self._pending:
            after = [x for _, x in self.losses[start:start + self.window]]
            if len(after) < self.window and not (final and after):
                keep.append((start, what, before, nb, setting))
                continue
            mean = float(np.mean(after))
            if before > 0 and mean > self.factor * before:
                it = self.losses[start + len(after) - 1][0]
                self._armed = False   # the window check re-arms once the loss is back under factor × best
                self._warn("stage_change", it, mean / before, setting,
                           f"loss rose {mean / before:.3g}x across the stage change {what} at iteration "
                           f"{self.losses[start][0]} (mean of {len(after)} iterations after vs {nb} before)")
        self._pending = keep

    def _warn(self, kind, it, ratio, setting, text):
        msg = f"warning: {text}" + (f"; look at {setting}" if setting else "")
        self.events.append({"kind": kind, "iteration": int(it), "ratio": float(ratio) if math.isfinite(ratio) else None,
                            "setting": setting, "message": msg})
        self.log(msg)


def parse_loss_watch(w, file, key):
    """``loss_watch``: {factor > 1, window ≥ 1} (missing keys: the defaults), or false / null: off."""
    if w is None or w is False:
        return None
    if not isinstance(w, dict) or set(w) - {"factor", "window"}:
        raise ConfigError(f"expected {{factor: f > 1, window: n ≥ 1}} or false, got {w!r}", file=file, key=key)
    out = {"factor": DEFAULT_FACTOR, "window": DEFAULT_WINDOW}
    try:
        if "factor" in w:
            if isinstance(w["factor"], bool) or not float(w["factor"]) > 1 or not np.isfinite(float(w["factor"])):
                raise ValueError
            out["factor"] = float(w["factor"])
    except (TypeError, ValueError):
        raise ConfigError(f"expected a finite number > 1, got {w['factor']!r}", file=file, key=key + ".factor")
    if "window" in w:
        v = w["window"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 1:
            raise ConfigError(f"expected an integer ≥ 1, got {v!r}", file=file, key=key + ".window")
        out["window"] = int(v)
    return out
