"""Large steps for mesh optimisation (Nicolet, Jacobson, Jakob 2021, "Large Steps in Inverse
Rendering of Geometry"): the optimiser moves u = (I + λ L) x instead of the vertex positions x,
with L the mesh's combinatorial Laplacian (L = D - A over the edges of the welded mesh). A gradient
step on u is a smooth (diffused) step on x, so that the noisy, local gradients of a few silhouette
pixels move whole regions of the surface instead of crumpling it.

With the device optimiser stepping the pool's x directly (optim/adam.py), the reparameterisation is
two solves per iteration (the map is linear):

    g_u = (I + λL)⁻¹ g_x                      (precondition: before the optimiser step)
    x ← x_old - (I + λL)⁻¹ (x_old - x_stepped)   (after it: the optimiser stepped x by its u-step)

Copies of a vertex at one position (uv seams) are one unknown: their gradients are summed, their
positions moved together. Solves by conjugate gradients (float64, numpy; (I + λL) is symmetric
positive definite), warm-started, to a relative residual of 1e-10.
"""
import numpy as np


class LargeSteps:
    """The reparameterisation of one mesh's vertex positions (V, 3) with weight λ ≥ 0.

    faces (F, 3) vertex indices; positions (V, 3) (to weld coincident copies, scene/deform.py)."""

    def __init__(self, faces, positions, lam):
        from ..scene.deform import edge_topology, weld
        self.lam = float(lam)
        self.rep, self.n_unique, self.first = weld(positions)
        edges, _faces, _split = edge_topology(faces, positions)   # first copies: map them to welded indices
        u = np.unique(np.sort(self.rep[edges], axis=1), axis=0)
        u = u[u[:, 0] != u[:, 1]]
        self.i, self.j = u[:, 0], u[:, 1]
        self.deg = np.bincount(self.i, minlength=self.n_unique) + np.bincount(self.j, minlength=self.n_unique)

    def matvec(self, x):
        """(I + λL) x for welded values x (n, 3)."""
        y = x * (1.0 + self.lam * self.deg)[:, None]
        for c in range(x.shape[1]):
            y[:, c] -= self.lam * (np.bincount(self.i, x[self.j, c], self.n_unique)
                                   + np.bincount(self.j, x[self.i, c], self.n_unique))
        return y

    def solve(self, b, x0=None, tol=1e-10, max_iter=2000):
        """(I + λL)⁻¹ b for welded b (n, 3), by conjugate gradients."""
        x = np.zeros_like(b) if x0 is None else x0.copy()
        r = b - self.matvec(x)
        p = r.copy()
        rr = np.sum(r * r, 0)
        bb = np.maximum(np.sum(b * b, 0), 1e-300)
        for _ in range(max_iter):
            if np.all(rr <= tol * tol * bb):
                break
            Ap = self.matvec(p)
            alpha = rr / np.maximum(np.sum(p * Ap, 0), 1e-300)
            x += alpha * p
            r -= alpha * Ap
            rr_new = np.sum(r * r, 0)
            p = r + (rr_new / np.maximum(rr, 1e-300)) * p
            rr = rr_new
        return x

    def _gather(self, a):
        """Per-vertex (V, 3) -> welded sums (n, 3)."""
        out = np.zeros((self.n_unique, a.shape[1]))
        for c in range(a.shape[1]):
            out[:, c] = np.bincount(self.rep, a[:, c], self.n_unique)
        return out

    def precondition(self, g):
        """∂/∂u of the loss from its gradient ∂/∂x (V, 3): the same value for every copy of a vertex."""
        return self.solve(self._gather(np.asarray(g, np.float64)))[self.rep]

    def apply(self, x_old, x_stepped):
        """The positions after the optimiser's step on u: x_old - (I + λL)⁻¹ Δ, with Δ = x_old -
        x_stepped taken at each vertex's first copy (copies get equal steps)."""
        x_old = np.asarray(x_old, np.float64)
        delta = (x_old - np.asarray(x_stepped, np.float64))[self.first]
        return x_old - self.solve(delta)[self.rep]
