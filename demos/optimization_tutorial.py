"""Mitsuba 3's "gradient-based optimization" tutorial, written with tirender's Python API: the Cornell box's red
wall recovered from a wrong colour by Adam on PRB gradients, the loop exactly as Mitsuba's tutorial writes it
(render, loss, backward, step). Prints the loss and the parameter error per iteration and writes the loss curve
and the final render (PNG) next to the target.

    python demos/optimization_tutorial.py [--scene configs/cbox.yaml | scene.xml] [--key red.reflectance]
                                          [--iters 50] [--spp 16] [--lr 0.05] [--out out/optimization_tutorial]

Mitsuba's tutorial (its scenes/cbox.xml, key 'red.reflectance.value': tirender accepts Mitsuba's parameter
names too) starts the wall at (0.01, 0.2, 0.9) and runs 50 iterations of Adam(lr=0.05) at 16 spp.
"""
import argparse
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default=os.path.join(HERE, "..", "configs", "cbox.yaml"))
    ap.add_argument("--key", default="red.reflectance")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--out", default=os.path.join("out", "optimization_tutorial"))
    a = ap.parse_args(argv)
    import tirender
    from tirender.io.images import save_png
    from tirender.io.plot import save_line_plot

    scene = tirender.load_scene(a.scene, overrides=[f"sensors.0.film.width={a.res}",
                                                    f"sensors.0.film.height={a.res}"])
    truth = scene.params[a.key].copy()
    target = tirender.render(scene, spp=512, seed=12345)
    scene.params[a.key] = np.broadcast_to(np.array([0.01, 0.2, 0.9], np.float32), truth.shape)

    opt = tirender.Adam(scene, lr=a.lr, params=[a.key])
    losses, errors = [], []
    for it in range(a.iters):
        img = tirender.render(scene, spp=a.spp, seed=it, progress=False)
        loss, dy = tirender.losses.l2(img, target)
        opt.step(tirender.render_grad(scene, dy, spp=a.spp, seed=10_000 + it, progress=False))
        err = float(np.sqrt(np.mean((scene.params[a.key] - truth) ** 2)))
        losses.append(loss)
        errors.append(err)
        print(f"iteration {it:3d}: loss {loss:.6f}, parameter error {err:.6f}")
    os.makedirs(a.out, exist_ok=True)
    save_png(os.path.join(a.out, "target.png"), target)
    save_png(os.path.join(a.out, "final.png"), tirender.render(scene, spp=128, seed=1, progress=False))
    its = list(range(a.iters))
    save_line_plot(os.path.join(a.out, "loss.png"), {"loss (l2)": (its, losses), "parameter RMSE": (its, errors)},
                   title="Mitsuba's optimisation tutorial in tirender", xlabel="iteration", logy=True)
    print(f"{a.key}: {np.round(scene.params[a.key], 4).tolist()} (truth {np.round(truth, 4).tolist()}); "
          f"wrote {a.out}/loss.png, final.png, target.png")
    return 0 if errors[-1] * 5 <= errors[0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
