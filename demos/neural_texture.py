"""Neural texture: a small torch MLP maps UV to RGB; its texture is trained through the renderer.

    python demos/neural_texture.py                     # out/neural_texture/ (about 70 s on a 2-core CPU)
    python demos/neural_texture.py --docs              # also docs/neural_texture_loss.png

The scene is configs/texture_recovery.yaml's (a textured plane under an area light) with a second,
oblique sensor. Targets: both views rendered with the true 256x256 texture. The MLP (Fourier
features of (u, v) -> 2 hidden layers -> sigmoid RGB, ~4.9k weights) is evaluated at the texel
centres of a res x res bitmap that replaces the scene's texture (``scene.resize_texture``); every
step renders both views through ``tirender.torch.render`` (PRB gradients back into the bitmap,
torch's autograd on into the MLP) and takes an Adam step on the MLP's weights.

Writes loss.csv, loss.png (image loss per step and the texture's RMSE vs the true texture),
texture.png (learned), texture_truth.png, target_view{0,1}.png, final_view{0,1}.png and
metrics.json to --out.
"""
import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import tirender  # noqa: E402
import tirender.torch as tt  # noqa: E402
from tirender.config import load_config  # noqa: E402
from tirender.io.images import save_png  # noqa: E402
from tirender.io.plot import save_line_plot  # noqa: E402
from tirender.textures import resample_texture  # noqa: E402

TEX = "canvas.reflectance"


class NeuralTexture(torch.nn.Module):
    """UV (N, 2) in [0, 1]² -> RGB (N, 3) in (0, 1): Gaussian Fourier features [sin, cos](2π B uv)
    (B: (2, n_freq), std ``scale``, fixed), two hidden ReLU layers, a sigmoid."""

    def __init__(self, n_freq=24, hidden=48, scale=4.0, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("B", torch.randn(2, n_freq, generator=g) * scale)
        self.net = torch.nn.Sequential(torch.nn.Linear(2 * n_freq, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, 3))

    def forward(self, uv):
        p = 2 * math.pi * uv @ self.B
        return torch.sigmoid(self.net(torch.cat([torch.sin(p), torch.cos(p)], -1)))

    def texture(self, res):
        """The (res, res, 3) bitmap at texel centres (row 0: v = 0, the top of the image)."""
        c = (torch.arange(res, dtype=torch.float32) + 0.5) / res
        v, u = torch.meshgrid(c, c, indexing="ij")
        return self(torch.stack([u, v], -1).reshape(-1, 2)).reshape(res, res, 3)


def make_scene(film):
    """configs/texture_recovery.yaml's scene at film x film pixels, plus an oblique second view."""
    cfg = load_config(os.path.join(ROOT, "configs", "texture_recovery.yaml"),
                      scene_overrides=[f"sensors.0.film.width={film}", f"sensors.0.film.height={film}"])
    s0 = cfg["scene"]["sensors"][0]
    s1 = json.loads(json.dumps(s0))
    s1["to_world"] = {"look_at": {"origin": [1.4, -0.6, 2.6], "target": [0, 0, 0], "up": [0, 1, 0]}}
    cfg["scene"]["sensors"].append(s1)
    return tirender.scene_from_config(cfg)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join("out", "neural_texture"))
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--res", type=int, default=64, help="texture resolution the MLP is evaluated at")
    ap.add_argument("--film", type=int, default=128, help="film width and height of both views")
    ap.add_argument("--spp", type=int, default=4, help="samples per pixel, forward and adjoint")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--docs", action="store_true", help="also write docs/neural_texture_loss.png")
    a = ap.parse_args(argv)
    tirender.init(a.arch)
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)

    scene = make_scene(a.film)
    views = range(len(scene.sensors))
    truth = resample_texture(scene.params[TEX], a.res, a.res)
    targets = [torch.from_numpy(tirender.render(scene, spp=128, seed=1000 + v, sensor=v, progress=False))
               for v in views]
    for v in views:
        save_png(os.path.join(a.out, f"target_view{v}.png"), targets[v].numpy())
    save_png(os.path.join(a.out, "texture_truth.png"), truth)
    scene.resize_texture(TEX, a.res, a.res)

    model = NeuralTexture()
    n_weights = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rows = []
    t0 = time.perf_counter()
    print(f"neural texture: {n_weights} weights -> {a.res}x{a.res} texture, {len(views)} views of "
          f"{a.film}x{a.film}, {a.spp} spp, {a.iters} Adam steps")
    for it in range(a.iters):
        opt.zero_grad()
        tex = model.texture(a.res)
        loss = 0.0
        for v in views:
            img = tt.render(scene, {TEX: tex}, spp=a.spp, seed=1 + 2 * (it * len(views) + v), sensor=v)
            loss = loss + ((img - targets[v]) ** 2).mean() / len(views)
        loss.backward()
        opt.step()
        err = float(np.sqrt(((tex.detach().numpy() - truth) ** 2).mean()))
        rows.append((it, loss.item(), err, time.perf_counter() - t0))
        if it % 10 == 0 or it + 1 == a.iters:
            print(f"  iter {it:4d}  loss {rows[-1][1]:.3e}  texture RMSE {err:.4f}  {rows[-1][3]:6.1f} s")
    seconds = time.perf_counter() - t0

    with torch.no_grad():
        tex = model.texture(a.res).numpy()
    save_png(os.path.join(a.out, "texture.png"), tex)
    scene.params[TEX] = tex
    for v in views:
        save_png(os.path.join(a.out, f"final_view{v}.png"), tirender.render(scene, spp=64, seed=5000 + v, sensor=v,
                                                                            progress=False))
    with open(os.path.join(a.out, "loss.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["iteration", "loss", "texture_rmse", "seconds"])
        w.writerows([(i, f"{lo:.6g}", f"{e:.6g}", f"{s:.3f}") for i, lo, e, s in rows])
    x = np.array([r[0] for r in rows], float)
    series = {"image loss (L2, 2 views)": (x, np.array([r[1] for r in rows])),
              "texture RMSE vs truth": (x, np.array([r[2] for r in rows]))}
    plots = [os.path.join(a.out, "loss.png")] + ([os.path.join(ROOT, "docs", "neural_texture_loss.png")] if a.docs
                                                 else [])
    for p in plots:
        save_line_plot(p, series, title=f"neural texture ({n_weights}-weight MLP) through tirender.torch",
                       xlabel="Adam step", ylabel="value", logy=True)
    metrics = dict(weights=n_weights, iters=a.iters, res=a.res, film=a.film, spp=a.spp, views=len(views),
                   loss_start=rows[0][1], loss_end=rows[-1][1], texture_rmse_start=rows[0][2],
                   texture_rmse_end=rows[-1][2], seconds=round(seconds, 1))
    with open(os.path.join(a.out, "metrics.json"), "w") as fh:
        json.dump(metrics, fh, indent=2)
    print(f"done in {seconds:.1f} s: loss {rows[0][1]:.3e} -> {rows[-1][1]:.3e}, texture RMSE "
          f"{rows[0][2]:.4f} -> {rows[-1][2]:.4f}; wrote {a.out}" + (" and docs/neural_texture_loss.png" if a.docs
                                                                     else ""))
    return metrics


if __name__ == "__main__":
    main()
