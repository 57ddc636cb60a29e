"""Generate ``tirender/bsdfs/ior.py``'s CONDUCTORS table from Mitsuba 3 itself.

    python3 tools/mitsuba_conductor_ior.py > /tmp/table.py   (then paste into bsdfs/ior.py, CONDUCTORS to its
                                                              dict() of PALIK_SAME)

Every material Mitsuba accepts (the ``<name>.eta.spd`` / ``<name>.k.spd`` files of its
resources/data/ior, shipped in the pip package under mitsuba/data/ior) is loaded as
``{'type': 'conductor', 'material': name}`` in the ``scalar_rgb`` variant, and the RGB values Mitsuba
derives from the spectral data (ior_from_file: the spectrum integrated against the CIE 1931
matching functions, then XYZ -> linear sRGB) are read back with ``mi.traverse``.
"""
import os
import textwrap

import mitsuba as mi


def main():
    mi.set_variant("scalar_rgb")
    mi.set_log_level(mi.LogLevel.Error)   # (out-of-gamut clamping warnings go to stdout)
    d = os.path.join(os.path.dirname(mi.__file__), "data", "ior")
    names = sorted({f[:-len(".eta.spd")] for f in os.listdir(d) if f.endswith(".eta.spd")})
    rows = {}
    for n in names:
        if not os.path.exists(os.path.join(d, n + ".k.spd")):
            continue
        p = mi.traverse(mi.load_dict({"type": "conductor", "material": n}))
        eta = [float(x) for x in p["eta.value"]]
        k = [float(x) for x in p["k.value"]]
        rows[n] = "((%.9g, %.9g, %.9g), (%.9g, %.9g, %.9g))" % (*eta, *k)
    same = [n for n in rows if rows.get(n + "_palik") == rows[n]]     # <name>_palik: the same data as <name>
    print("CONDUCTORS = {  # name: ((eta r, g, b), (k r, g, b)), Mitsuba %s scalar_rgb" % mi.__version__)
    for n, v in rows.items():
        if not (n.endswith("_palik") and n[:-len("_palik")] in same):
            print("    %r: %s," % (n, v))
    print("}")
    print("# materials whose <name>_palik data give the same RGB values as <name>'s")
    print("\n".join(textwrap.wrap("PALIK_SAME = (%s)" % ", ".join("%r" % n for n in same), 116,
                                   subsequent_indent="              ")))
    print('CONDUCTORS = dict(sorted({**CONDUCTORS, **{n + "_palik": CONDUCTORS[n] for n in PALIK_SAME}}.items()))')


if __name__ == "__main__":
    main()
