"""``tirender optimize CONFIG`` for configs with a top-level ``grin:`` section (dispatched from
tirender/cli.py: ``--out DIR``, ``--iters N``, ``--resume``, ``--arch``)."""
from .. import backend


def check(cfg, cfg_path):
    """Validate the ``grin:`` section before Taichi starts (ConfigError naming file and key)."""
    from .train import parse_config
    return parse_config(cfg, cfg_path, (cfg.get("_dir") if isinstance(cfg, dict) else None))


def optimize_main(cfg, cfg_path, out_dir, iters=None, resume=False, parsed=None):
    """Run the ``grin:`` section of a config; writes out_dir/{grid.npy, metrics.json, loss.png, loss.csv,
    final_*.png, target_*.png, iter_*.png, checkpoint.npz}. Returns the metrics dict."""
    from .train import train
    backend.ensure_init()
    parsed = parsed or check(cfg, cfg_path)
    return train(None, cfg_path, out_dir, iters=iters, resume=resume, parsed=parsed)


def summary(m, cfg_path, out):
    """One closing line: per view the evaluation MSE before → after (factor), time."""
    parts = [f"{n}: MSE {v['mse_start']:.3g} -> {v['mse_final']:.3g} ({v['mse_reduction']:.1f}x), "
             f"rel. L2 {v['rel_l2_start']:.3f} -> {v['rel_l2_final']:.3f}" for n, v in m["views"].items()]
    return (f"optimized GRIN cube {cfg_path}: {m['iterations']} iterations in {m['train_time_s']:.1f} s "
            f"({m['seconds_per_iteration'] * 1000:.0f} ms each); " + "; ".join(parts)
            + f" -> {out} (grid.npy, metrics.json, loss.png, final_*.png)")
