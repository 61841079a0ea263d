#!/usr/bin/env python3
"""Arithmetic for bench/run, standard library only.

  figures.py fio-bw JSON_FILE read|write      prints the job's bandwidth in bytes/s from fio's JSON output
  figures.py report VALUES_FILE S_MIB D_MIB   turns raw per-run values into figures beside their baselines

VALUES_FILE holds `run name value` lines: ckpt_bench's raw output (save_seconds, load_seconds, ...) and the fio
bandwidths (fio_write_bps, fio_read_bps) of the same run. The staging arena's size comes from the library where it
reports it, else from CKPT_ARENA_BYTES, else it is printed as 0 with a comment. Every figure is computed within its run (a ratio
compares numbers taken on the same directory minutes apart), then the median over the runs is printed.
"""
import json
import os
import statistics
import sys

GIB = float(1 << 30)

# (name, unit, format) in the order they are printed; each group is a figure, its baseline, and their ratio.
FIGURES = [
    ("save_gibps", "GiB/s", "%.3f"),
    ("fio_write_gibps", "GiB/s", "%.3f"),
    ("save_vs_fio_write", "ratio", "%.3f"),
    ("load_gibps", "GiB/s", "%.3f"),
    ("fio_read_gibps", "GiB/s", "%.3f"),
    ("load_vs_fio_read", "ratio", "%.3f"),
    ("async_block_ms", "ms", "%.1f"),
    ("memcpy_ms", "ms", "%.1f"),
    ("async_block_vs_memcpy", "ratio", "%.2f"),
    ("dedup_save_ms", "ms", "%.1f"),
    ("dedup_fio_write_ms", "ms", "%.1f"),
    ("dedup_save_vs_fio_write", "ratio", "%.3f"),
    ("save_peak_rss_mib", "MiB", "%.1f"),
    ("pre_save_rss_mib", "MiB", "%.1f"),
    ("save_rss_overhead_mib", "MiB", "%.1f"),
    # Context for the figures above: a training loop's later saves, and the first save's blocking time.
    ("save_warm_gibps", "GiB/s", "%.3f"),
    ("async_block_first_ms", "ms", "%.1f"),
]


def fail(message):
    sys.stderr.write("figures.py: %s\n" % message)
    sys.exit(1)


def fio_bandwidth(path, direction):
    """bw_bytes of the first job; fio may print notes before its JSON, so parsing starts at the first brace."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    start = text.find("{")
    if start < 0:
        fail("%s holds no JSON (fio's output: %r)" % (path, text[:200]))
    try:
        report, _ = json.JSONDecoder().raw_decode(text[start:])
        bandwidth = int(report["jobs"][0][direction]["bw_bytes"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        fail("%s: no jobs[0].%s.bw_bytes in fio's JSON (%s)" % (path, direction, e))
    if bandwidth <= 0:
        fail("%s: fio reports no %s bandwidth" % (path, direction))
    print(bandwidth)


def read_values(path):
    """{run: {name: value}} from `run name value` lines."""
    runs = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) != 3:
                fail("%s:%d: expected `run name value`, got %r" % (path, number, line))
            try:
                runs.setdefault(fields[0], {})[fields[1]] = float(fields[2])
            except ValueError:
                fail("%s:%d: %r is not a number" % (path, number, fields[2]))
    return runs


def run_figures(raw, state_gib, dedup_gib):
    """The figures of one run; a missing raw value names itself."""
    def need(name):
        if name not in raw:
            fail("no %s was measured" % name)
        if raw[name] <= 0 and name.endswith(("seconds", "_bps")):
            fail("%s is %s, not a positive duration or bandwidth" % (name, raw[name]))
        return raw[name]

    f = {}
    f["save_gibps"] = state_gib / need("save_seconds")
    f["fio_write_gibps"] = need("fio_write_bps") / GIB
    f["save_vs_fio_write"] = f["save_gibps"] / f["fio_write_gibps"]
    f["load_gibps"] = state_gib / need("load_seconds")
    f["fio_read_gibps"] = need("fio_read_bps") / GIB
    f["load_vs_fio_read"] = f["load_gibps"] / f["fio_read_gibps"]
    f["async_block_ms"] = need("async_block_ms")
    f["memcpy_ms"] = need("memcpy_ms")
    f["async_block_vs_memcpy"] = f["async_block_ms"] / max(f["memcpy_ms"], 1e-6)
    f["dedup_save_ms"] = need("dedup_save_seconds") * 1e3
    f["dedup_fio_write_ms"] = dedup_gib / f["fio_write_gibps"] * 1e3
    f["dedup_save_vs_fio_write"] = f["dedup_fio_write_ms"] / f["dedup_save_ms"]
    f["save_peak_rss_mib"] = need("save_peak_rss_mib")
    f["pre_save_rss_mib"] = need("pre_save_rss_mib")
    f["save_rss_overhead_mib"] = f["save_peak_rss_mib"] - f["pre_save_rss_mib"]
    f["save_warm_gibps"] = state_gib / need("warm_save_seconds")
    f["async_block_first_ms"] = need("async_block_first_ms")
    return f


def report(path, state_mib, dedup_mib):
    runs = read_values(path)
    if not runs:
        fail("%s holds no measurements" % path)
    per_run = [run_figures(runs[r], state_mib / 1024.0, dedup_mib / 1024.0) for r in sorted(runs, key=int)]
    for name, unit, fmt in FIGURES:
        print("%s %s %s" % (name, fmt % statistics.median(f[name] for f in per_run), unit))
    comments = []
    arena = [runs[r]["staging_arena_mib"] for r in runs if "staging_arena_mib" in runs[r]]
    if arena:
        print("staging_arena_mib %.1f MiB" % statistics.median(arena))
    elif os.environ.get("CKPT_ARENA_BYTES", "").isdigit():
        print("staging_arena_mib %.1f MiB" % (int(os.environ["CKPT_ARENA_BYTES"]) / float(1 << 20)))
        comments.append("arena: CKPT_ARENA_BYTES from the environment; not reported by this library version")
    else:
        print("staging_arena_mib 0 MiB")
        comments.append("arena: not reported by this library version")
    if len(per_run) > 1:
        for name in ("save_vs_fio_write", "load_vs_fio_read", "async_block_vs_memcpy", "dedup_save_vs_fio_write"):
            comments.append("%s per run: %s" % (name, " ".join("%.3f" % f[name] for f in per_run)))
    for comment in comments:
        print("# " + comment)

def main(argv):
    if len(argv) == 4 and argv[1] == "fio-bw" and argv[3] in ("read", "write"):
        fio_bandwidth(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "report":
        report(argv[2], float(argv[3]), float(argv[4]))
    else:
        fail("usage: figures.py fio-bw JSON_FILE read|write | report VALUES_FILE S_MIB D_MIB")


if __name__ == "__main__":
    main(sys.argv)
