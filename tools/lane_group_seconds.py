"""Seconds per xdist group of a default lane, for tests/conftest.py GROUP_SECONDS (the order in which the
groups are handed to the workers: the longest first).

Reads the output of a lane run with ``--durations=0`` (every setup, call and teardown with its group,
``tests/test_x.py::test_y@group``) and prints the groups above ``--min`` seconds, longest first, as Python.

    HOME=$(mktemp -d) python3 -m pytest -q tests -p no:cacheprovider --durations=0 > lane.out   # a cold lane
    python3 tools/lane_group_seconds.py lane.out
"""
import argparse
import collections
import re

LINE = re.compile(r"\s*(?:[0-9.]+\s+)?([0-9.]+)s (?:call|setup|teardown)\s+(\S.*)@(\S+)")


def group_seconds(lines):
    """{group: seconds} summed over the durations lines of a lane's output."""
    out = collections.Counter()
    for line in lines:
        m = LINE.match(line)
        if m:
            out[m.group(3)] += float(m.group(1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lane_output")
    ap.add_argument("--min", type=float, default=15.0, help="leave out groups shorter than this (seconds)")
    a = ap.parse_args(argv)
    with open(a.lane_output, encoding="utf-8") as f:
        sec = group_seconds(f)
    print("GROUP_SECONDS = {")
    for g, s in sorted(sec.items(), key=lambda kv: -kv[1]):
        if s >= a.min:
            print(f'    "{g}": {round(s)},')
    print("}")
    print(f"# total {round(sum(sec.values()))} s over {len(sec)} groups")


if __name__ == "__main__":
    main()
