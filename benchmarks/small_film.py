"""Small films at many spp on the CPU: the tile schedule with each tile's samples split into items
(integrators/kernels.tile_chunks, the default) against a thread per tile (kernels.ITEMS = 1), alternated in one
process (the same kernels, no compile in the timings), and Mitsuba 3 (llvm_ad_rgb) on the same scene where it is
installed. Prints wall seconds, CPU seconds / wall (cores busy) and the ratios.

The scene: Mitsuba's participating-media test scene (48 x 48, 868 spp: its test budget of 2·10⁶ samples) when
$TIRENDER_MITSUBA_DATA holds mitsuba-data, else the Cornell box (configs/cbox.yaml) on a 48 x 48 film.

    python benchmarks/small_film.py [--rounds 3] [--spp 868]
"""
import argparse
import os
import resource
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)
MEDIA = os.path.join("tests", "scenes", "participating_media", "test_homo_null_envmap_volpath.xml")


def _scene_file():
    data = os.environ.get("TIRENDER_MITSUBA_DATA")
    if data and os.path.isfile(os.path.join(data, MEDIA)):
        return os.path.join(data, MEDIA)
    return None


def _timed(fn):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return wall, (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall


def _mitsuba(xml, spp, rounds):
    """Mitsuba's render seconds (median of `rounds`), or None without mitsuba / LLVM."""
    try:
        import drjit as dr
        import mitsuba as mi
        mi.set_variant("llvm_ad_rgb")
    except Exception:  # noqa: BLE001 - optional side by side
        return None
    sc = mi.load_file(xml, spp=spp, res=48, integrator="volpath")
    dr.eval(mi.render(sc, spp=4))
    times = []
    for k in range(rounds):
        t0 = time.perf_counter()
        img = mi.render(sc, spp=spp, seed=k)
        dr.eval(img)
        dr.sync_thread()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spp", type=int, default=868)
    a = ap.parse_args(argv)
    import tirender
    from tirender.integrators import kernels
    tirender.init("cpu")
    xml = _scene_file()
    if xml:
        sc = tirender.load_scene(xml, defines={"spp": str(a.spp), "integrator": "volpath"})
        name = "Mitsuba's participating_media/test_homo_null_envmap_volpath.xml, 48²"
    else:
        sc = tirender.load_scene(os.path.join(ROOT, "configs", "cbox.yaml"),
                                 overrides=["sensors.0.film.width=48", "sensors.0.film.height=48"])
        name = "configs/cbox.yaml on a 48² film"
    tirender.render(sc, spp=4, seed=0, progress=False)        # compile
    default_items = kernels.ITEMS
    res = {"chunked": [], "per tile": []}
    for k in range(a.rounds):
        for label, items in (("per tile", 1), ("chunked", default_items)):
            kernels.ITEMS = items
            res[label].append(_timed(lambda: tirender.render(sc, spp=a.spp, seed=k, progress=False)))
    kernels.ITEMS = default_items
    med = {lab: sorted(v)[len(v) // 2] for lab, v in res.items()}
    print(f"{name}, {a.spp} spp, {a.rounds} alternated rounds (median wall s, cores busy):")
    for lab, (w, busy) in med.items():
        print(f"  tirender {lab:9s} {w:7.2f} s  {busy:4.2f} cores")
    print(f"  chunked / per tile: {med['chunked'][0] / med['per tile'][0]:.2f}x the time")
    mt = _mitsuba(xml, a.spp, a.rounds) if xml else None
    if mt:
        print(f"  Mitsuba llvm_ad_rgb {mt:7.2f} s; tirender (chunked) / Mitsuba: {med['chunked'][0] / mt:.2f}x")


if __name__ == "__main__":
    main()
