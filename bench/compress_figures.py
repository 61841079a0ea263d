#!/usr/bin/env python3
"""Arithmetic for bench/compress, standard library only.

  compress_figures.py report VALUES THROTTLE_MBPS
        turns the per-run values into figures, each beside its baselines of the same run: medians, then `#` lines
        with every run's value of every figure, then the bounds the figures are held to. Exits 3 where a bound is
        missed (every line printed first), 1 where a value is missing or the throttle did not hold.

VALUES holds `run name value` lines (bench/figures.py's format): for each kind of bytes <x> (bf16, f32, adam)
ckpt_bench codec's <x>_input_bytes, <x>_codec_* and <x>_zstd_* (stored_bytes, compress_seconds,
decompress_seconds: one pass over the input) and compress_weights.py's <x>_zipnn_* of the same; the throttled disk's
fio write (throttled_fio_write_bps) and ckpt_bench throttled-save's throttled_* (state_bytes,
uncompressed_data_bytes, compressed_data_bytes, uncompressed_save_seconds, compressed_save_seconds).
"""
import statistics
import sys

import figures  # bench/figures.py, beside this file

GIB = figures.GIB
KINDS = ("bf16", "f32", "adam")
# The compressed save must gain at least this share of its compression ratio in time on the throttled disk.
SPEEDUP_SHARE_BOUND = 0.8
# Single-thread compression speed that the codec must reach on BF16, GiB/s.
COMPRESS_SPEED_BOUND = 1.0
# A save without compression faster than the throttle by more than this was not throttled: its figures would be
# the disk's, not the throttle's.
THROTTLE_SLACK = 1.25
EXIT_BOUND_MISSED = 3


def kind_figures(kind):
    """(name, unit, format) of one kind of bytes: ckpt's codec, zipnn and zstd on the same bytes, and ckpt over
    zipnn (above 1: ckpt stores fewer bytes, or compresses faster)."""
    return [
        ("compress_ratio_" + kind, "ratio", "%.5f"),
        ("zipnn_ratio_" + kind, "ratio", "%.5f"),
        ("zstd_ratio_" + kind, "ratio", "%.5f"),
        ("compress_ratio_vs_zipnn_" + kind, "ratio", "%.5f"),
        ("compress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
        ("zipnn_compress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
        ("zstd_compress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
        ("compress_speed_vs_zipnn_" + kind, "ratio", "%.2f"),
        ("decompress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
        ("zipnn_decompress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
        ("zstd_decompress_gibps_per_core_" + kind, "GiB/s", "%.3f"),
    ]


# In the order they are printed: BF16 first, with the headline speed (BF16's) after its group.
FIGURES = (kind_figures("bf16") + [("compress_gibps_per_core", "GiB/s", "%.3f")] + kind_figures("f32") +
           kind_figures("adam") + [
               # The save to the throttled disk: the disk's own rate (fio in the same cgroup), the save without
               # compression over it, then each save's time until durable, and the speedup against the ratio the
               # compressed save stored the same state at.
               ("throttled_disk_write_mbps", "MB/s", "%.1f"),
               ("throttled_uncompressed_save_mbps", "MB/s", "%.1f"),
               ("throttled_uncompressed_save_s", "s", "%.3f"),
               ("throttled_compressed_save_s", "s", "%.3f"),
               ("throttled_compressed_save_speedup", "ratio", "%.3f"),
               ("throttled_state_compress_ratio", "ratio", "%.4f"),
               ("throttled_speedup_vs_compress_ratio", "ratio", "%.3f"),
           ])
FORMATS = {name: fmt for name, _, fmt in FIGURES}


def codec_figures(raw, f, kind):
    """Ratios (bytes in over bytes stored) and single-thread speeds (GiB of input per second) of the three codecs."""
    def need(name):
        return figures.need(raw, "%s_%s" % (kind, name))

    gib = need("input_bytes") / GIB
    for codec, prefix in (("codec", ""), ("zipnn", "zipnn_"), ("zstd", "zstd_")):
        f["%sratio_%s" % (prefix or "compress_", kind)] = need("input_bytes") / need(codec + "_stored_bytes")
        f["%scompress_gibps_per_core_%s" % (prefix, kind)] = gib / need(codec + "_compress_seconds")
        f["%sdecompress_gibps_per_core_%s" % (prefix, kind)] = gib / need(codec + "_decompress_seconds")
    f["compress_ratio_vs_zipnn_" + kind] = f["compress_ratio_" + kind] / f["zipnn_ratio_" + kind]
    f["compress_speed_vs_zipnn_" + kind] = (f["compress_gibps_per_core_" + kind] /
                                            f["zipnn_compress_gibps_per_core_" + kind])


def throttled_figures(raw, f, throttle_mbps):
    def need(name):
        return figures.need(raw, "throttled_" + name)

    state_bytes = need("state_bytes")
    f["throttled_disk_write_mbps"] = need("fio_write_bps") / 1e6
    f["throttled_uncompressed_save_s"] = need("uncompressed_save_seconds")
    f["throttled_compressed_save_s"] = need("compressed_save_seconds")
    f["throttled_uncompressed_save_mbps"] = state_bytes / f["throttled_uncompressed_save_s"] / 1e6
    f["throttled_compressed_save_speedup"] = f["throttled_uncompressed_save_s"] / f["throttled_compressed_save_s"]
    f["throttled_state_compress_ratio"] = state_bytes / need("compressed_data_bytes")
    f["throttled_speedup_vs_compress_ratio"] = (f["throttled_compressed_save_speedup"] /
                                                f["throttled_state_compress_ratio"])
    if need("uncompressed_data_bytes") != state_bytes:
        figures.fail("the save without compression wrote %d bytes of data for a state of %d" %
                     (need("uncompressed_data_bytes"), state_bytes))
    for what in ("throttled_disk_write_mbps", "throttled_uncompressed_save_mbps"):
        if f[what] > THROTTLE_SLACK * throttle_mbps:
            figures.fail("%s is %.1f MB/s under a throttle of %g MB/s: the throttle did not hold its writes" %
                         (what, f[what], throttle_mbps))


def run_figures(raw, throttle_mbps):
    f = {}
    for kind in KINDS:
        codec_figures(raw, f, kind)
    f["compress_gibps_per_core"] = f["compress_gibps_per_core_bf16"]
    throttled_figures(raw, f, throttle_mbps)
    return f


def bounds(median):
    """(statement, holds) of every bound the figures are held to, on the medians."""
    return [
        ("compress_ratio_bf16 >= zipnn_ratio_bf16 (%.5f vs %.5f)" %
         (median["compress_ratio_bf16"], median["zipnn_ratio_bf16"]),
         median["compress_ratio_bf16"] >= median["zipnn_ratio_bf16"]),
        ("compress_gibps_per_core >= %.1f GiB/s (%.3f)" % (COMPRESS_SPEED_BOUND, median["compress_gibps_per_core"]),
         median["compress_gibps_per_core"] >= COMPRESS_SPEED_BOUND),
        ("throttled_compressed_save_speedup >= %.1f x throttled_state_compress_ratio (%.3f vs %.1f x %.4f = %.3f)" %
         (SPEEDUP_SHARE_BOUND, median["throttled_compressed_save_speedup"], SPEEDUP_SHARE_BOUND,
          median["throttled_state_compress_ratio"],
          SPEEDUP_SHARE_BOUND * median["throttled_state_compress_ratio"]),
         median["throttled_speedup_vs_compress_ratio"] >= SPEEDUP_SHARE_BOUND),
    ]


def report(path, throttle_mbps):
    runs = figures.read_values(path)
    if not runs:
        figures.fail("%s holds no measurements" % path)
    per_run = [run_figures(runs[r], throttle_mbps) for r in sorted(runs, key=int)]
    median = {}
    for name, unit, fmt in FIGURES:
        median[name] = statistics.median(f[name] for f in per_run)
        print("%s %s %s" % (name, fmt % median[name], unit))
    for name, _, fmt in FIGURES:
        print("# %s per run: %s" % (name, " ".join(fmt % f[name] for f in per_run)))
    missed = 0
    for statement, holds in bounds(median):
        print("# bound: %s: %s" % (statement, "holds" if holds else "MISSED"))
        missed += not holds
    return EXIT_BOUND_MISSED if missed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "report":
        try:
            throttle_mbps = float(argv[3])
        except ValueError:
            throttle_mbps = 0
        if throttle_mbps <= 0:
            figures.fail("THROTTLE_MBPS must be a positive number, got %r" % argv[3])
        sys.exit(report(argv[2], throttle_mbps))
    figures.fail("usage: compress_figures.py report VALUES THROTTLE_MBPS")


if __name__ == "__main__":
    main(sys.argv)
