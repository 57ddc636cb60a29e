"""Height-field shapes: a grid mesh displaced by a differentiable height texture (caustic design,
issue 16), optionally closed into a slab.

Object space: the top surface is z = h(u, v) over [-1, 1]² with a grid of W × H vertices, vertex
(i, j) (g = j·W + i) at x = -1 + 2u, y = -1 + 2v, u = i / (W - 1), v = j / (H - 1) (the rectangle's
uv convention). h is the bilinear lookup of the height texture (a pool parameter ``<id>.height``,
one channel, in object-space units; ``textures.tex_eval``, clamped at the border) at the vertex's
uv, so the texture may have any resolution (coarse-to-fine optimisation resizes it, the mesh stays).
Vertex normals come from the heights by an explicit stencil: n_obj = (-∂h/∂x, -∂h/∂y, 1) with
central differences of the neighbouring vertices' heights (one-sided at the border); in world
space N = normalize(M⁻ᵀ n_obj), P = M (x, y, h) + t (``to_world``). With ``thickness: T > 0`` the
shape is a closed solid: a flat bottom at z = -T (normal -z) and four vertical side walls whose top
edge follows the border heights (walls and bottom keep constant normals); the bottom is a grid like
the top, so that the mesh is closed (every edge shared by two faces: a solid that can be fabricated).

Device layout (storage.py): per triangle ``tri_hf`` = 2·(height field index) + (1 for the top
surface), -1 for other shapes; ``tri_code`` = per corner 2·g + b (b = 1: the bottom level z = -T).
``displace`` rewrites the triangles of every height field from the pool (positions, and the top's
vertex normals); the host then refits the BVH (bvh.refit).

Differentiable: the heights. ``corner_adjoint`` takes ∂/∂P and ∂/∂N of one triangle corner (world
space) to the height texels (the stencil's and the lookup's adjoints, atomic adds into the pool's
gradient).
"""
import numpy as np
import taichi as ti

from ..core.math import vec3
from ..core.optics import normalize_adjoint
from ..textures import tex_eval_scalar, tex_eval_scalar_adjoint

TOP = 1          # tri_hf bit 0: a triangle of the top surface (normals from the heights)


def topology(W, H, thickness):
    """The grid mesh of a W x H height field: (codes (F, 3) int32, top (F,) bool, normals_obj (F, 3)
    the constant object-space normal of wall/bottom faces (0 for the top), uv (F, 3, 2))."""
    g = np.arange(W * H).reshape(H, W)
    a, b, c, d = g[:-1, :-1], g[:-1, 1:], g[1:, 1:], g[1:, :-1]       # (i,j) (i+1,j) (i+1,j+1) (i,j+1)
    top = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]) * 2
    codes, normals = [top], [np.zeros((len(top), 3))]
    if thickness > 0:
        # walls: border vertices in counter-clockwise order (seen from +z), each edge a quad
        ring = np.concatenate([g[0, :-1], g[:-1, -1], g[-1, :0:-1], g[:0:-1, 0]])
        ring_next = np.roll(ring, -1)
        side = [(0, -1, 0)] * (W - 1) + [(1, 0, 0)] * (H - 1) + [(0, 1, 0)] * (W - 1) + [(-1, 0, 0)] * (H - 1)
        p, q = 2 * ring, 2 * ring_next                                     # top corners
        walls = np.concatenate([np.stack([p + 1, q + 1, q], -1), np.stack([p + 1, q, p], -1)])
        codes.append(walls)
        normals.append(np.concatenate([np.array(side, float)] * 2))
        bottom = top[:, [0, 2, 1]] + 1                                     # the same grid at z = -T, facing -z
        codes.append(bottom)
        normals.append(np.tile([(0.0, 0.0, -1.0)], (len(bottom), 1)))
    codes = np.concatenate(codes).astype(np.int32)
    is_top = np.zeros(len(codes), bool)
    is_top[:len(top)] = True
    gi = codes >> 1
    uv = np.stack([(gi % W) / (W - 1), (gi // W) / (H - 1)], -1).astype(np.float32)
    return codes, is_top, np.concatenate(normals), uv


def object_positions(codes, W, H, heights, thickness):
    """Object-space corner positions (F, 3, 3) for per-vertex heights (H*W,) (numpy, the kernel's primal
    for nearest-texel heights: used for the initial BVH, which displace + refit then make exact)."""
    gi = codes >> 1
    x = -1.0 + 2.0 * (gi % W) / (W - 1)
    y = -1.0 + 2.0 * (gi // W) / (H - 1)
    z = np.where(codes & 1, -thickness, heights[gi])
    return np.stack([x, y, z], -1)


def vertex_heights_nearest(tex, W, H):
    """Per-vertex heights (H*W,) by nearest texel of tex (h, w, 1): an approximation for the initial BVH."""
    th, tw = tex.shape[:2]
    i = np.clip(np.rint(np.arange(W) / max(W - 1, 1) * tw - 0.5), 0, tw - 1).astype(int)
    j = np.clip(np.rint(np.arange(H) / max(H - 1, 1) * th - 0.5), 0, th - 1).astype(int)
    return tex[j][:, i, 0].reshape(-1)


# ---------------------------------------------------------------------------------- device side
@ti.func
def _uv(st: ti.template(), h, g):
    W = st.hf_w[h]
    H = st.hf_h[h]
    return ti.Vector([(g % W) / (W - 1.0), (g // W) / (H - 1.0)])


@ti.func
def vertex_height(st: ti.template(), h, g):
    """Height (object units) of grid vertex g of height field h."""
    return tex_eval_scalar(st, st.hf_tex[h], _uv(st, h, g))


@ti.func
def _stencil(st: ti.template(), h, g):
    """Neighbours (gl, gr, gd, gu) of vertex g along x and y (clamped) and the spans 1/Δx, 1/Δy."""
    W = st.hf_w[h]
    H = st.hf_h[h]
    i = g % W
    j = g // W
    il = ti.max(i - 1, 0)
    ir = ti.min(i + 1, W - 1)
    jd = ti.max(j - 1, 0)
    ju = ti.min(j + 1, H - 1)
    inv_dx = (W - 1.0) / (2.0 * (ir - il))
    inv_dy = (H - 1.0) / (2.0 * (ju - jd))
    return j * W + il, j * W + ir, jd * W + i, ju * W + i, inv_dx, inv_dy


@ti.func
def _normal_obj(st: ti.template(), h, g):
    gl, gr, gd, gu, ix, iy = _stencil(st, h, g)
    hx = (vertex_height(st, h, gr) - vertex_height(st, h, gl)) * ix
    hy = (vertex_height(st, h, gu) - vertex_height(st, h, gd)) * iy
    return vec3(-hx, -hy, 1.0)


@ti.func
def corner_position(st: ti.template(), h, code):
    """World position of a triangle corner (code 2·g + b)."""
    g = code >> 1
    W = st.hf_w[h]
    x = -1.0 + 2.0 * (g % W) / (W - 1.0)
    y = -1.0 + 2.0 * (g // W) / (st.hf_h[h] - 1.0)
    z = st.hf_zb[h]
    if code & 1 == 0:
        z = vertex_height(st, h, g)
    return st.hf_m[h] @ ti.Vector([x, y, z, 1.0])


@ti.func
def corner_normal(st: ti.template(), h, code):
    """World shading normal of a top-surface corner (the stencil normal)."""
    return (st.hf_nm[h] @ _normal_obj(st, h, code >> 1)).normalized()


@ti.func
def corner_adjoint(st: ti.template(), h, code, top, gP, gN):
    """Scatter ∂/∂(heights) of <gP, P> + <gN, N> for one corner (world P and, for the top surface,
    its vertex normal N) into the height texture's gradient."""
    g = code >> 1
    if code & 1 == 0:
        m = st.hf_m[h]
        gz = gP[0] * m[0, 2] + gP[1] * m[1, 2] + gP[2] * m[2, 2]
        gn = vec3(0.0)
        if top == 1:
            nm = st.hf_nm[h]
            gn = nm.transpose() @ normalize_adjoint(nm @ _normal_obj(st, h, g), gN)
        gl, gr, gd, gu, ix, iy = _stencil(st, h, g)
        # the vertex's own height (position), then its stencil neighbours (normal): one lookup adjoint
        for q in range(5 if top == 1 else 1):
            gq = g
            w = gz
            if q == 1:
                gq, w = gr, -gn[0] * ix
            elif q == 2:
                gq, w = gl, gn[0] * ix
            elif q == 3:
                gq, w = gu, -gn[1] * iy
            elif q == 4:
                gq, w = gd, gn[1] * iy
            tex_eval_scalar_adjoint(st, st.hf_tex[h], _uv(st, h, gq), w)


@ti.kernel
def displace(st: ti.template()):
    """Rewrite every height-field triangle from the current heights: p0, e1, e2 and (top surface)
    the corner normals."""
    for k in range(st.info_i[2]):
        code = st.tri_hf[k]
        if code >= 0:
            h = code >> 1
            c = st.tri_code[k]
            p0 = corner_position(st, h, c[0])
            st.tri_p0[k] = p0
            st.tri_e1[k] = corner_position(st, h, c[1]) - p0
            st.tri_e2[k] = corner_position(st, h, c[2]) - p0
            if code & TOP != 0:
                st.tri_n0[k] = corner_normal(st, h, c[0])
                st.tri_n1[k] = corner_normal(st, h, c[1])
                st.tri_n2[k] = corner_normal(st, h, c[2])
