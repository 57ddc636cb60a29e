"""The keys every optimisation task writes first in its ``metrics.json`` (``tirender optimize`` on a scene, a radiance
field, a GRIN volume), so that scripts read any task's result alike; task-specific keys follow.

    initial_loss   the task's objective before its first step (float)
    final_loss     the same objective after the last step (float)
    iterations     steps taken (int)
    seconds        wall-clock time of the run, s (float)
"""
STANDARD_KEYS = ("initial_loss", "final_loss", "iterations", "seconds")


def standard(metrics, initial_loss, final_loss, iterations, seconds):
    """A new dict: the standard keys (module doc) first, then ``metrics``' own keys (a task's own value of a
    standard key is replaced by the standard one)."""
    out = {"initial_loss": None if initial_loss is None else float(initial_loss),
           "final_loss": None if final_loss is None else float(final_loss),
           "iterations": int(iterations), "seconds": round(float(seconds), 3)}
    out.update({k: v for k, v in metrics.items() if k not in STANDARD_KEYS})
    return out
