"""Scene storage: Storage.upload (one kernel for all of a scene's arrays) writes exactly what
field.from_numpy of the zero-padded arrays would, for every field kind (scalar rank 1 and 2,
vector, matrix), also over a previous scene's larger contents."""
import os

import numpy as np

import tirender
from tirender.scene.storage import padded

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _check(sc):
    st = sc.bind()
    assert st.owner is sc
    for name, arr in sc._arrays.items():
        got = getattr(st, name).to_numpy()
        want = padded(arr, got.shape[0], got.dtype).reshape(got.shape)
        assert np.array_equal(got, want), name


def test_upload_writes_every_field_as_from_numpy_of_the_padded_array():
    big = tirender.load_scene(os.path.join(ROOT, "configs", "volume_recovery.yaml"))
    _check(big)
    small = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    _check(small)            # rows the volume scene wrote beyond the texture scene's counts are zero again
    kinds = {type(getattr(small.bind(), n)).__name__ + str(len(getattr(small.bind(), n).shape))
             for n in small._arrays}
    assert {"ScalarField1", "ScalarField2", "MatrixField1"} <= kinds


def test_upload_of_empty_arrays_zeroes_the_fields():
    sc = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    st = sc.bind()
    st.upload({"emtri_idx": np.zeros((0,), np.int32), "tri_p0": np.zeros((0, 3), np.float32),
               "bsdf_f": np.ones((1, st.bsdf_f.shape[1]), np.float32)})
    assert not st.emtri_idx.to_numpy().any() and not st.tri_p0.to_numpy().any()
    f = st.bsdf_f.to_numpy()
    assert (f[0] == 1).all() and not f[1:].any()
    sc2 = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    _check(sc2)


def test_a_scene_with_per_triangle_extras_never_gets_a_storage_without():
    """Height fields, differentiable meshes and mesh attributes read per-triangle extras (tri_hf, tri_dm, tri_code,
    tri_face) on every triangle row; a large scene without them gets a storage without (48 MB less for 2 M
    triangles); a later small scene that needs them must not reuse that storage."""
    from tirender.scene.storage import capacities, fits, has_extras
    large = capacities({"tris": 100_000})
    assert not has_extras(large) and fits(large, {"tris": 100})
    assert not fits(large, {"tris": 100, "xtris": 100})
    grown = capacities({"tris": 100, "xtris": 100}, large)
    assert has_extras(grown) and grown["tris"] >= large["tris"]
    assert fits(grown, {"tris": 100_000}) and fits(grown, {"tris": 100_000, "xtris": 100_000})
    assert has_extras(capacities({"tris": 10})) and fits(capacities({"tris": 10}), {"tris": 10, "xtris": 10})
    # capacities rounded from different counts: the extras still cover every triangle row
    big = capacities({"tris": 2_100_000})
    assert has_extras(capacities({"tris": 1_000_000, "xtris": 1_000_000}, big))


def test_more_quadrics_instances_or_sdf_values_keep_the_storage():
    """Quadric and instance counts only switch code on (a storage holding them holds any number); SDF values and
    mesh-attribute textures start at a generous capacity once present: a scene with one more sphere, instance, SDF
    value or attribute texture than the last reuses the storage (a new one recompiles every kernel)."""
    from tirender.scene.storage import capacities, fits
    none = capacities({"tris": 10})
    assert none["quads"] == none["insts"] == none["sdfv"] == none["atex"] == 0
    one = capacities({"tris": 10, "quads": 1, "insts": 1, "sdfv": 500, "atex": 1})
    assert one["quads"] == one["insts"] == 1 and one["sdfv"] >= 1 << 16 and one["atex"] >= 64
    assert fits(one, {"tris": 10, "quads": 40, "insts": 300, "sdfv": 60_000, "atex": 30})
    assert not fits(one, {"tris": 10, "sdfv": 100_000})
    grown = capacities({"tris": 10, "sdfv": 100_000}, one)
    assert grown["sdfv"] >= 100_000 and grown["quads"] == grown["insts"] == 1 and grown["atex"] == one["atex"]
    assert not fits(none, {"tris": 10, "quads": 1})       # (scenes with quadrics get their own storage anyway)


def test_triangles_are_gathered_in_bvh_order():
    """triangles.gather writes row k from the triangle the BVH put there (bvh.prim_order[k]): corners p0,
    e1 = p1 - p0, e2 = p2 - p0, corner normals and uvs, its shape; over several shapes (per-shape vertex
    offsets) and with rows past the scene's triangles zeroed."""
    sc = tirender.load_scene(os.path.join(ROOT, "configs", "cbox.yaml"))
    st = sc.bind()
    shapes = sc.desc.shapes
    assert len(shapes) > 3
    o, n = sc.bvh.prim_order, sc.n_triangles
    P = np.concatenate([s.positions[s.faces] for s in shapes])[o]
    N = np.concatenate([s.normals[s.faces] if s.normals is not None else np.zeros((len(s.faces), 3, 3), np.float32)
                        for s in shapes])[o]
    UV = np.concatenate([s.uvs[s.faces] if s.uvs is not None else np.zeros((len(s.faces), 3, 2), np.float32)
                         for s in shapes])[o]
    shape = np.repeat(np.arange(len(shapes)), [len(s.faces) for s in shapes])[o]
    want = {"tri_p0": P[:, 0], "tri_e1": P[:, 1] - P[:, 0], "tri_e2": P[:, 2] - P[:, 0], "tri_shape": shape}
    for k in range(3):
        want[f"tri_n{k}"], want[f"tri_uv{k}"] = N[:, k], UV[:, k]
    for name, w in want.items():
        got = getattr(st, name).to_numpy()
        assert np.array_equal(got[:n], w), name
        assert not got[n:].any(), name


def test_small_scenes_keep_their_storage_after_a_large_one():
    """A scene that fits no storage gets a larger one; scenes that fit the first keep it (and the kernels compiled
    against it); a third size releases the one in between (its scene binds again, with its parameters as the device
    had them)."""
    from tirender.scene.storage import Storage
    from scenes import cornell_like
    small = tirender.load_scene(cornell_like(w=8))
    st0 = small.bind()
    big = tirender.load_scene(cornell_like(w=300))             # more pixels than the first storage holds
    st1 = big.bind()
    assert st1 is not st0 and st1.caps["pixels"] >= 300 * 300
    assert small.bind() is st0 and st0.owner is small and st1.owner is big
    off = big.params.info("red.reflectance").offset
    st1.pool[off] = 0.25                                        # an optimiser step on the device
    big.mark_device_params_changed()
    bigger = tirender.load_scene(cornell_like(w=600))
    st2 = bigger.bind()
    assert st2 not in (st0, st1) and st1.owner is None
    assert small.bind() is st0 and st0.owner is small
    assert big.bind() is st2 and float(big.params["red.reflectance"].ravel()[0]) == 0.25
