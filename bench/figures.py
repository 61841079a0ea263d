#!/usr/bin/env python3
"""Arithmetic for bench/run, standard library only.

  figures.py fio-job JSON_FILE read|write           prints the job's bandwidth in bytes/s and its CPU seconds from
                                                    fio's JSON output, as `fio_<rw>_bps` and `fio_<rw>_cpu_seconds`
                                                    lines
  figures.py fio-copy JSON_FILE BYTES               prints the copy's bandwidth in bytes/s (a reading and a writing
                                                    job at once)
  figures.py ucx-bw LOG MESSAGE_BYTES               prints ucx_perftest's overall bandwidth in bytes/s
  figures.py report VALUES_FILE S_MIB D_MIB R_MIB   turns raw per-run values into figures beside their baselines

VALUES_FILE holds `run name value` lines: ckpt_bench's raw output (save_seconds, load_seconds, save_cpu_seconds,
load_cpu_seconds, ...; the multi-rank loads report per rank, as <load>_<counter>.rank<r>, with <load>_ranks), the
fio bandwidths and CPU times (fio_write_bps, fio_read_bps, fio_copy_bps, fio_write_cpu_seconds,
fio_read_cpu_seconds; dedup_fio_write_bps and reshard_fio_read_bps of the dedup and reshard sizes), the CPU time
of one checksum pass over the state's size (checksum_cpu_seconds),
ucx_perftest_bps and, where a CUDA device exists, the device staging and its cudaMemcpy baseline
(d2h_stage_seconds, cuda_memcpy_pinned_seconds) of the same run. The staging arena's size comes from the
library where it reports it, else from CKPT_ARENA_BYTES, else it is printed as 0 with a comment. Every figure is
computed within its run (a ratio compares numbers taken on the same directory minutes apart), then the median over
the runs is printed.
"""
import json
import os
import statistics
import sys

GIB = float(1 << 30)
MIB = float(1 << 20)
# ckpt's CKPT_TRANSPORT_* numbering.
TRANSPORTS = {1: "none", 2: "ucx", 3: "nccl"}
# ucx_perftest's bandwidth column and its per-message time must agree this closely, or its units have changed.
UCX_UNIT_TOLERANCE = 0.02

# (name, unit, format) in the order they are printed; each group is a figure, its baseline, and their ratio.
FIGURES = [
    ("save_gibps", "GiB/s", "%.3f"),
    ("fio_write_gibps", "GiB/s", "%.3f"),
    ("save_vs_fio_write", "ratio", "%.3f"),
    # CPU seconds per GiB moved: ckpt's rank and its I/O workers over the save, fio's job over its run.
    ("save_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("fio_write_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("save_cpu_vs_fio", "ratio", "%.2f"),
    # A save written in place (CKPT_SAVE_IN_PLACE: ckpt_save returns once durable, nothing copied into the arena),
    # by a fresh context as save_gibps, against the same fio write.
    ("save_in_place_gibps", "GiB/s", "%.3f"),
    ("save_in_place_vs_fio_write", "ratio", "%.3f"),
    ("save_in_place_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("save_in_place_cpu_vs_fio", "ratio", "%.2f"),
    # fio verifies nothing it moves; ckpt hashes every block it writes and checks every block it reads. Beside fio,
    # the CPU time of that verification alone: one pass of the library's checksum over as many bytes of memory not in
    # the cache (bench/checksum_pass.cc), added to fio's.
    ("checksum_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("save_in_place_cpu_vs_fio_and_checksum", "ratio", "%.2f"),
    ("load_gibps", "GiB/s", "%.3f"),
    ("fio_read_gibps", "GiB/s", "%.3f"),
    ("load_vs_fio_read", "ratio", "%.3f"),
    ("load_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("fio_read_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("load_cpu_vs_fio", "ratio", "%.2f"),
    ("load_cpu_vs_fio_and_checksum", "ratio", "%.2f"),
    ("export_gibps", "GiB/s", "%.3f"),
    ("export_vs_fio_write", "ratio", "%.3f"),
    # The same export against fio reading and writing at once, which an export's data movement is.
    ("fio_copy_gibps", "GiB/s", "%.3f"),
    ("export_vs_fio_copy", "ratio", "%.3f"),
    ("safetensors_load_gibps", "GiB/s", "%.3f"),
    ("safetensors_load_vs_fio_read", "ratio", "%.3f"),
    ("async_block_ms", "ms", "%.1f"),
    ("memcpy_ms", "ms", "%.1f"),
    ("async_block_vs_memcpy", "ratio", "%.2f"),
    # The copy-on-write save: blocks for the protection only (target <= 0.1 of the memcpy at 1 GiB; the first save's
    # on 4 KiB pages, the next once the library collapsed the state into huge pages), and its copy overlaps the
    # writes (target >= 0.8 of fio's write until committed).
    ("cow_save_block_first_ms", "ms", "%.2f"),
    ("cow_save_block_ms", "ms", "%.2f"),
    ("cow_save_block_vs_memcpy", "ratio", "%.3f"),
    ("cow_save_durable_gibps", "GiB/s", "%.3f"),
    ("cow_save_durable_vs_fio_write", "ratio", "%.3f"),
    # Replicas checking each other (CKPT_SAVE_CHECK_REPLICAS) on bench/run's replica ranks, each holding the whole
    # state: the blocking time of the slowest rank with the check and without, for the copy-on-write save (target:
    # the check adds <= 0.1 of a memcpy of the state) and for the default save staged at the call.
    ("replica_cow_block_ms", "ms", "%.1f"),
    ("replica_cow_check_block_ms", "ms", "%.1f"),
    ("replica_memcpy_ms", "ms", "%.1f"),
    ("replica_check_stall_vs_memcpy", "ratio", "%.3f"),
    ("replica_staged_block_ms", "ms", "%.1f"),
    ("replica_staged_check_block_ms", "ms", "%.1f"),
    ("replica_check_staged_stall_vs_memcpy", "ratio", "%.3f"),
    # An incremental save (CKPT_SAVE_INCREMENTAL) of a fine-tuning state with 95 % of its bytes frozen, against a
    # full save of the same state: the bytes each wrote (target: incremental_bytes_ratio <= 0.06), their times until
    # committed, and until ckpt_save returned (the incremental save hashes the state at the call).
    ("incremental_full_bytes", "bytes", "%.0f"),
    ("incremental_written_bytes", "bytes", "%.0f"),
    ("incremental_bytes_ratio", "ratio", "%.4f"),
    ("incremental_full_save_s", "s", "%.3f"),
    ("incremental_save_s", "s", "%.3f"),
    ("incremental_time_ratio", "ratio", "%.3f"),
    ("incremental_full_block_ms", "ms", "%.1f"),
    ("incremental_block_ms", "ms", "%.1f"),
    # The dedup save beside fio writing as many bytes right before it.
    ("dedup_save_ms", "ms", "%.1f"),
    ("dedup_fio_write_ms", "ms", "%.1f"),
    ("dedup_save_vs_fio_write", "ratio", "%.3f"),
    ("save_peak_rss_mib", "MiB", "%.1f"),
    ("pre_save_rss_mib", "MiB", "%.1f"),
    ("save_rss_overhead_mib", "MiB", "%.1f"),
    # Context for the figures above: a training loop's later saves, and the first save's blocking time.
    ("save_warm_gibps", "GiB/s", "%.3f"),
    ("async_block_first_ms", "ms", "%.1f"),
    # The parallel load: resharding, reading each stored byte once, and the exchange between ranks. A figure whose
    # inputs were not measured (no ucx_perftest, no transport) is left out, and a comment says why.
    ("reshard_load_gibps", "GiB/s", "%.3f"),
    ("reshard_fio_read_gibps", "GiB/s", "%.3f"),  # fio reading as many bytes right before the load
    ("reshard_load_vs_fio_read", "ratio", "%.3f"),
    ("read_amplification", "ratio", "%.2f"),
    ("read_amplification_no_exchange", "ratio", "%.2f"),
    # The reshard load as the library chose to read it, and with each strategy forced (CKPT_LOAD_READS).
    ("read_amplification_reshard", "ratio", "%.2f"),
    ("reshard_once_load_vs_fio_read", "ratio", "%.3f"),
    ("read_amplification_reshard_once", "ratio", "%.2f"),
    ("reshard_own_load_vs_fio_read", "ratio", "%.3f"),
    ("read_amplification_reshard_own", "ratio", "%.2f"),
    ("exchange_gbps", "GB/s", "%.3f"),
    ("ucx_perftest_gbps", "GB/s", "%.3f"),
    ("exchange_vs_ucx_perftest", "ratio", "%.3f"),
    # Staging from CUDA memory, measured only where a device exists.
    ("d2h_stage_gbps", "GB/s", "%.3f"),
    ("cuda_memcpy_pinned_gbps", "GB/s", "%.3f"),
    ("d2h_stage_vs_memcpy", "ratio", "%.3f"),
    # The memory tier (ckpt-agent): saving into its memory, restoring from it, and persisting after a crash.
    ("mem_save_block_ms", "ms", "%.1f"),
    ("mem_memcpy_ms", "ms", "%.1f"),
    ("mem_save_block_vs_memcpy", "ratio", "%.2f"),
    ("mem_save_complete_ms", "ms", "%.1f"),
    ("mem_save_fresh_complete_ms", "ms", "%.1f"),
    ("mem_save_complete_vs_fresh", "ratio", "%.2f"),
    ("mem_restore_gibps", "GiB/s", "%.3f"),
    ("mem_restore_vs_storage_load", "ratio", "%.2f"),
    ("crash_to_committed_ms", "ms", "%.1f"),
    ("crash_fio_write_ms", "ms", "%.1f"),
    ("crash_to_committed_vs_fio_write", "ratio", "%.2f"),
    # Replication between two agents over UCX's TCP transport, against ucx_perftest over TCP in the same run.
    ("replication_gbps", "GB/s", "%.3f"),
    ("ucx_perftest_tcp_gbps", "GB/s", "%.3f"),
    ("replication_vs_ucx_perftest", "ratio", "%.3f"),
    # The first step's replica, written into fresh memory rather than the recycled files of the step before.
    ("replication_fresh_gbps", "GB/s", "%.3f"),
    ("replication_fresh_vs_ucx_perftest", "ratio", "%.3f"),
    # The second step's, the first written into recycled files, which the receiver maps then (later steps find the
    # files they are sent from and written into mapped).
    ("replication_first_recycled_gbps", "GB/s", "%.3f"),
    ("replication_first_recycled_vs_ucx_perftest", "ratio", "%.3f"),
    # ucx_perftest with endpoints that handle a peer's failure, as replication's do: UCX then moves large messages
    # over TCP as copied segments, not zero-copy (1 MiB ones, as the agents set).
    ("ucx_perftest_tcp_peer_errors_gbps", "GB/s", "%.3f"),
    ("replication_vs_ucx_perftest_peer_errors", "ratio", "%.3f"),
]
# The loads measured on several ranks, as prefixed by bench/run.
RANKED_LOADS = ("reshard_load", "exchange_load", "no_exchange_load")
# The reshard load with CKPT_LOAD_READS forced, by the strategy it names.
FORCED_RESHARD_LOADS = ("reshard_once_load", "reshard_own_load")
# ckpt_context_stats.last_load_reads.
LOAD_READS = {1: "read once + exchange", 2: "own reads"}


def fail(message):
    sys.stderr.write("figures.py: %s\n" % message)
    sys.exit(1)


def fio_report(path):
    """fio's JSON report; fio may print notes before it, so parsing starts at the first brace."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    start = text.find("{")
    if start < 0:
        fail("%s holds no JSON (fio's output: %r)" % (path, text[:200]))
    try:
        report, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as e:
        fail("%s: fio's JSON does not parse (%s)" % (path, e))
    return report


def fio_job(path, direction):
    """bw_bytes of the first job, and its CPU seconds: fio's usr_cpu and sys_cpu are percentages of the job's
    runtime (job_runtime, ms) measured with getrusage of the job's process, every thread of it."""
    try:
        job = fio_report(path)["jobs"][0]
        bandwidth = int(job[direction]["bw_bytes"])
        cpu_seconds = (float(job["usr_cpu"]) + float(job["sys_cpu"])) / 100 * int(job["job_runtime"]) / 1e3
    except (KeyError, IndexError, TypeError, ValueError) as e:
        fail("%s: no jobs[0].%s.bw_bytes, usr_cpu, sys_cpu or job_runtime in fio's JSON (%s)" % (path, direction, e))
    if bandwidth <= 0:
        fail("%s: fio reports no %s bandwidth" % (path, direction))
    print("fio_%s_bps %d" % (direction, bandwidth))
    print("fio_%s_cpu_seconds %.6f" % (direction, cpu_seconds))


def fio_copy_bandwidth(path, size):
    """Bytes/s of a copy: `size` bytes over the longer runtime of fio's reading and writing jobs."""
    report = fio_report(path)
    try:
        runtime_ms = max(int(job["job_runtime"]) for job in report["jobs"])
    except (ValueError, KeyError, TypeError) as e:
        fail("%s: no jobs[].job_runtime in fio's JSON (%s)" % (path, e))
    if runtime_ms <= 0 or len(report["jobs"]) != 2:
        fail("%s: expected a reading and a writing job with runtimes" % path)
    print(int(size / (runtime_ms / 1e3)))


def ucx_bandwidth(path, message_bytes):
    """Bytes/s from the client's `Final:` row: iterations, overhead in usec (50th percentile, average, overall),
    bandwidth in MB/s (average, overall), message rate (average, overall). UCX 1.13 prints MB/s with MB = 2^20;
    the overall bandwidth is checked against the overall time per message, so a change of units fails loudly."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if not any("bandwidth (MB/s)" in line for line in lines):
        fail("%s: no `bandwidth (MB/s)` column in ucx_perftest's output" % path)
    final = [line.split() for line in lines if line.split()[:1] == ["Final:"]]
    if len(final) != 1 or len(final[0]) != 9:
        fail("%s: expected one `Final:` row of 8 numbers in ucx_perftest's output" % path)
    try:
        overall_usec, overall_mb_per_s = float(final[0][4]), float(final[0][6])
    except ValueError:
        fail("%s: ucx_perftest's `Final:` row is not numeric: %r" % (path, " ".join(final[0])))
    if overall_usec <= 0 or overall_mb_per_s <= 0:
        fail("%s: ucx_perftest reports no bandwidth" % path)
    bandwidth = overall_mb_per_s * MIB
    from_time = message_bytes / (overall_usec * 1e-6)
    if abs(bandwidth / from_time - 1) > UCX_UNIT_TOLERANCE:
        fail("%s: %.2f MB/s (MB = 2^20) disagrees with %.3f usec per %d-byte message" %
             (path, overall_mb_per_s, overall_usec, message_bytes))
    print(int(bandwidth))


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


def need(raw, name):
    """A raw value of one run; a missing one names itself."""
    if name not in raw:
        fail("no %s was measured" % name)
    if raw[name] <= 0 and name.endswith(("seconds", "_bps")):
        fail("%s is %s, not a positive duration or bandwidth" % (name, raw[name]))
    return raw[name]


def need_time_spent(raw, name):
    """A raw CPU time that may be 0: the I/O workers' share when the rank read everything itself."""
    if name not in raw:
        fail("no %s was measured" % name)
    if raw[name] < 0:
        fail("%s is %s, not a duration" % (name, raw[name]))
    return raw[name]


def per_rank_count(raw, load):
    count = need(raw, load + "_ranks")
    if count < 1 or count != int(count):
        fail("%s_ranks is %s, not a number of ranks" % (load, count))
    return int(count)


def per_rank(raw, load, counter):
    """The values of `counter` on every rank of a multi-rank load, all of them present (times positive)."""
    values = [need(raw, "%s_%s.rank%d" % (load, counter, r)) for r in range(per_rank_count(raw, load))]
    if counter == "seconds" and min(values) <= 0:
        fail("a rank of %s reports a load time of %s seconds" % (load, min(values)))
    return values


def transport_of(raw, load):
    """The name of the transport every rank of `load` used; fails if the ranks disagree."""
    used = set(per_rank(raw, load, "transport"))
    if len(used) != 1:
        fail("the ranks of %s used different transports: %s" % (load, sorted(used)))
    number = int(used.pop())
    return TRANSPORTS.get(number, "transport %d" % number)


def strategy_of(raw, load):
    """How every rank of `load` read (LOAD_READS, with the library's read amplification); fails if they disagree."""
    if "%s_reads.rank0" % load not in raw:
        return "not reported by this library version"
    chosen = set(zip(per_rank(raw, load, "reads"), per_rank(raw, load, "read_amplification_milli")))
    if len(chosen) != 1:
        fail("the ranks of %s read differently: %s" % (load, sorted(chosen)))
    reads, milli = chosen.pop()
    return "%s (library's read amplification %.2f)" % (LOAD_READS.get(int(reads), "reads %d" % reads), milli / 1e3)


def parallel_load_figures(raw, f, reshard_gib, dedup_gib):
    """The resharding load against fio's read; the replicated load's bytes read against the distinct bytes, with
    and without exchange; the exchange's speed against ucx_perftest's."""
    reshard_s = max(per_rank(raw, "reshard_load", "seconds"))
    f["reshard_load_gibps"] = reshard_gib / reshard_s
    f["reshard_fio_read_gibps"] = need(raw, "reshard_fio_read_bps") / GIB
    f["reshard_load_vs_fio_read"] = f["reshard_load_gibps"] / f["reshard_fio_read_gibps"]
    f["read_amplification_reshard"] = sum(per_rank(raw, "reshard_load", "bytes_read")) / (reshard_gib * GIB)
    for load in FORCED_RESHARD_LOADS:
        if load + "_ranks" not in raw:  # a run from before the forced loads
            continue
        reads = load[len("reshard_"):-len("_load")]
        f["reshard_%s_load_vs_fio_read" % reads] = (reshard_gib / max(per_rank(raw, load, "seconds")) /
                                                   f["reshard_fio_read_gibps"])
        f["read_amplification_reshard_" + reads] = sum(per_rank(raw, load, "bytes_read")) / (reshard_gib * GIB)
    distinct_bytes = dedup_gib * GIB
    f["read_amplification"] = sum(per_rank(raw, "exchange_load", "bytes_read")) / distinct_bytes
    f["read_amplification_no_exchange"] = sum(per_rank(raw, "no_exchange_load", "bytes_read")) / distinct_bytes
    if transport_of(raw, "no_exchange_load") != "none":
        fail("the load with CKPT_TRANSPORT=none used %s" % transport_of(raw, "no_exchange_load"))
    if transport_of(raw, "exchange_load") != "none":
        exchange_s = max(per_rank(raw, "exchange_load", "exchange_seconds"))
        if exchange_s <= 0:  # a library without the counter: the whole load's time
            exchange_s = max(per_rank(raw, "exchange_load", "seconds"))
        f["exchange_gbps"] = sum(per_rank(raw, "exchange_load", "bytes_received")) / exchange_s / 1e9
    if "ucx_perftest_bps" in raw:
        f["ucx_perftest_gbps"] = need(raw, "ucx_perftest_bps") / 1e9
        if "exchange_gbps" in f:
            f["exchange_vs_ucx_perftest"] = f["exchange_gbps"] / f["ucx_perftest_gbps"]


def device_figures(raw, f, state_gib):
    """ckpt's staging of the state from device memory against plain cudaMemcpy into pinned memory, in GB/s (10^9
    bytes/s, as CUDA's own tools count); nothing where no device was measured."""
    if "d2h_stage_seconds" not in raw:
        return
    state_gb = state_gib * GIB / 1e9
    f["d2h_stage_gbps"] = state_gb / need(raw, "d2h_stage_seconds")
    f["cuda_memcpy_pinned_gbps"] = state_gb / need(raw, "cuda_memcpy_pinned_seconds")
    f["d2h_stage_vs_memcpy"] = f["d2h_stage_gbps"] / f["cuda_memcpy_pinned_gbps"]


def cpu_figures(raw, f, state_gib):
    """CPU seconds per GiB of the save and the load beside fio's write and read of as many bytes; nothing where
    ckpt_bench did not measure them (an older one)."""
    for phase, direction in (("save", "write"), ("save_in_place", "write"), ("load", "read")):
        if phase + "_cpu_seconds" not in raw:
            continue
        f[phase + "_cpu_s_per_gib"] = need(raw, phase + "_cpu_seconds") / state_gib
        f["fio_%s_cpu_s_per_gib" % direction] = need(raw, "fio_%s_cpu_seconds" % direction) / state_gib
        f[phase + "_cpu_vs_fio"] = f[phase + "_cpu_s_per_gib"] / f["fio_%s_cpu_s_per_gib" % direction]
        f[phase + "_worker_cpu_share"] = need_time_spent(raw, phase + "_worker_cpu_seconds") / raw[phase + "_cpu_seconds"]
    if "checksum_cpu_seconds" not in raw:
        return
    f["checksum_cpu_s_per_gib"] = raw["checksum_cpu_seconds"] / state_gib
    for phase, direction in (("save_in_place", "write"), ("load", "read")):
        if phase + "_cpu_s_per_gib" in f:
            verified = f["fio_%s_cpu_s_per_gib" % direction] + f["checksum_cpu_s_per_gib"]
            f[phase + "_cpu_vs_fio_and_checksum"] = f[phase + "_cpu_s_per_gib"] / verified


def copy_on_write_figures(raw, f, state_gib):
    """The copy-on-write save (CKPT_SAVE_COPY_ON_WRITE): its blocking time beside a memcpy of the same bytes, and its
    throughput until committed beside fio's write of the same run; nothing where ckpt_bench did not measure it."""
    if "cow_save_block_ms" not in raw:
        return
    f["cow_save_block_first_ms"] = need(raw, "cow_save_block_first_ms")
    f["cow_save_block_ms"] = need(raw, "cow_save_block_ms")
    f["cow_save_block_vs_memcpy"] = f["cow_save_block_ms"] / max(f["memcpy_ms"], 1e-6)
    f["cow_save_durable_gibps"] = state_gib / need(raw, "cow_save_seconds")
    f["cow_save_durable_vs_fio_write"] = f["cow_save_durable_gibps"] / f["fio_write_gibps"]


def replica_check_figures(raw, f):
    """The stall replica checks add: the slowest rank's median blocking time with CKPT_SAVE_CHECK_REPLICAS minus
    without, over the ranks' median memcpy of the state; nothing where ckpt_bench did not measure it."""
    if "replica_ranks" not in raw:
        return
    ranks = range(per_rank_count(raw, "replica"))

    def slowest(name):
        return max(need(raw, "%s.rank%d" % (name, r)) for r in ranks)

    f["replica_memcpy_ms"] = statistics.median(need(raw, "replica_memcpy_ms.rank%d" % r) for r in ranks)
    for kind, figure in (("cow", "replica_check_stall_vs_memcpy"),
                         ("staged", "replica_check_staged_stall_vs_memcpy")):
        f["replica_%s_block_ms" % kind] = slowest("replica_%s_block_ms" % kind)
        f["replica_%s_check_block_ms" % kind] = slowest("replica_%s_check_block_ms" % kind)
        added = f["replica_%s_check_block_ms" % kind] - f["replica_%s_block_ms" % kind]
        f[figure] = added / max(f["replica_memcpy_ms"], 1e-6)


def run_figures(raw, state_gib, dedup_gib, reshard_gib):
    """The figures of one run; a missing raw value names itself."""
    def measured(name):
        return need(raw, name)

    f = {}
    f["save_gibps"] = state_gib / measured("save_seconds")
    f["fio_write_gibps"] = measured("fio_write_bps") / GIB
    f["save_vs_fio_write"] = f["save_gibps"] / f["fio_write_gibps"]
    f["save_in_place_gibps"] = state_gib / measured("save_in_place_seconds")
    f["save_in_place_vs_fio_write"] = f["save_in_place_gibps"] / f["fio_write_gibps"]
    f["load_gibps"] = state_gib / measured("load_seconds")
    f["fio_read_gibps"] = measured("fio_read_bps") / GIB
    f["load_vs_fio_read"] = f["load_gibps"] / f["fio_read_gibps"]
    cpu_figures(raw, f, state_gib)
    # An export reads the checkpoint and writes as much: the disk's write speed bounds it.
    f["export_gibps"] = state_gib / measured("export_seconds")
    f["export_vs_fio_write"] = f["export_gibps"] / f["fio_write_gibps"]
    f["fio_copy_gibps"] = measured("fio_copy_bps") / GIB
    f["export_vs_fio_copy"] = f["export_gibps"] / f["fio_copy_gibps"]
    f["safetensors_load_gibps"] = state_gib / measured("safetensors_load_seconds")
    f["safetensors_load_vs_fio_read"] = f["safetensors_load_gibps"] / f["fio_read_gibps"]
    f["async_block_ms"] = measured("async_block_ms")
    f["memcpy_ms"] = measured("memcpy_ms")
    f["async_block_vs_memcpy"] = f["async_block_ms"] / max(f["memcpy_ms"], 1e-6)
    copy_on_write_figures(raw, f, state_gib)
    replica_check_figures(raw, f)
    for name in ("incremental_full_bytes", "incremental_written_bytes", "incremental_bytes_ratio",
                 "incremental_full_save_s", "incremental_save_s", "incremental_time_ratio",
                 "incremental_full_block_ms", "incremental_block_ms"):
        if name in raw:
            f[name] = raw[name]
    f["dedup_save_ms"] = measured("dedup_save_seconds") * 1e3
    f["dedup_fio_write_ms"] = dedup_gib * GIB / measured("dedup_fio_write_bps") * 1e3
    f["dedup_save_vs_fio_write"] = f["dedup_fio_write_ms"] / f["dedup_save_ms"]
    f["save_peak_rss_mib"] = measured("save_peak_rss_mib")
    f["pre_save_rss_mib"] = measured("pre_save_rss_mib")
    f["save_rss_overhead_mib"] = f["save_peak_rss_mib"] - f["pre_save_rss_mib"]
    f["save_warm_gibps"] = state_gib / measured("warm_save_seconds")
    f["async_block_first_ms"] = measured("async_block_first_ms")
    parallel_load_figures(raw, f, reshard_gib, dedup_gib)
    device_figures(raw, f, state_gib)
    memory_tier_figures(raw, f, state_gib)
    return f


def memory_tier_figures(raw, f, state_gib):
    """The memory tier: a save's blocking time against a memcpy of the same bytes, a restore from memory against
    the same load from storage with a cold cache, and the time from the trainer's death to the checkpoint committed
    on storage by the agent against fio writing as many bytes; nothing for a library without the tier."""
    if "mem_save_block_ms" not in raw:
        return
    f["mem_save_block_ms"] = need(raw, "mem_save_block_ms")
    f["mem_memcpy_ms"] = need(raw, "mem_memcpy_ms")
    f["mem_save_block_vs_memcpy"] = f["mem_save_block_ms"] / max(f["mem_memcpy_ms"], 1e-6)
    if "mem_save_fresh_seconds" in raw:
        f["mem_save_complete_ms"] = need(raw, "mem_save_seconds") * 1e3
        f["mem_save_fresh_complete_ms"] = need(raw, "mem_save_fresh_seconds") * 1e3
        f["mem_save_complete_vs_fresh"] = f["mem_save_complete_ms"] / f["mem_save_fresh_complete_ms"]
    f["mem_restore_gibps"] = state_gib / need(raw, "mem_restore_seconds")
    f["mem_restore_vs_storage_load"] = f["mem_restore_gibps"] / f["load_gibps"]
    f["crash_to_committed_ms"] = need(raw, "crash_to_committed_ms")
    f["crash_fio_write_ms"] = state_gib / f["fio_write_gibps"] * 1e3
    f["crash_to_committed_vs_fio_write"] = f["crash_to_committed_ms"] / f["crash_fio_write_ms"]
    if "replication_gbps" in raw and "ucx_perftest_tcp_bps" in raw:
        f["replication_gbps"] = need(raw, "replication_gbps")
        f["ucx_perftest_tcp_gbps"] = need(raw, "ucx_perftest_tcp_bps") / 1e9
        f["replication_vs_ucx_perftest"] = f["replication_gbps"] / f["ucx_perftest_tcp_gbps"]
        if "replication_fresh_gbps" in raw:
            f["replication_fresh_gbps"] = raw["replication_fresh_gbps"]
            f["replication_fresh_vs_ucx_perftest"] = f["replication_fresh_gbps"] / f["ucx_perftest_tcp_gbps"]
        if "replication_first_recycled_gbps" in raw:
            f["replication_first_recycled_gbps"] = raw["replication_first_recycled_gbps"]
            f["replication_first_recycled_vs_ucx_perftest"] = (f["replication_first_recycled_gbps"] /
                                                               f["ucx_perftest_tcp_gbps"])
        if "ucx_perftest_tcp_peer_errors_bps" in raw:
            f["ucx_perftest_tcp_peer_errors_gbps"] = raw["ucx_perftest_tcp_peer_errors_bps"] / 1e9
            f["replication_vs_ucx_perftest_peer_errors"] = (f["replication_gbps"] /
                                                            f["ucx_perftest_tcp_peer_errors_gbps"])


def report(path, state_mib, dedup_mib, reshard_mib):
    runs = read_values(path)
    if not runs:
        fail("%s holds no measurements" % path)
    ordered = [runs[r] for r in sorted(runs, key=int)]
    per_run = [run_figures(raw, state_mib / 1024.0, dedup_mib / 1024.0, reshard_mib / 1024.0) for raw in ordered]
    for name, unit, fmt in FIGURES:
        values = [f[name] for f in per_run if name in f]
        if values:
            print("%s %s %s" % (name, fmt % statistics.median(values), unit))
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
    comments.extend(parallel_load_comments(ordered, per_run))
    comments.extend(cpu_comments(per_run))
    if len(per_run) > 1:
        for name in ("save_vs_fio_write", "save_cpu_vs_fio", "save_in_place_vs_fio_write", "save_in_place_cpu_vs_fio",
                     "save_in_place_cpu_vs_fio_and_checksum", "load_vs_fio_read", "load_cpu_vs_fio",
                     "load_cpu_vs_fio_and_checksum",
                     "export_vs_fio_write", "export_vs_fio_copy", "safetensors_load_vs_fio_read",
                     "async_block_vs_memcpy", "cow_save_block_vs_memcpy", "cow_save_durable_vs_fio_write",
                     "replica_check_stall_vs_memcpy", "replica_check_staged_stall_vs_memcpy",
                     "incremental_bytes_ratio", "incremental_time_ratio", "dedup_save_vs_fio_write", "reshard_load_vs_fio_read", "reshard_once_load_vs_fio_read",
                     "reshard_own_load_vs_fio_read", "exchange_vs_ucx_perftest", "d2h_stage_vs_memcpy",
                     "mem_save_block_vs_memcpy", "mem_save_complete_vs_fresh",
                     "mem_restore_vs_storage_load", "crash_to_committed_vs_fio_write",
                     "replication_vs_ucx_perftest", "replication_fresh_vs_ucx_perftest",
                     "replication_first_recycled_vs_ucx_perftest", "replication_vs_ucx_perftest_peer_errors"):
            if all(name in f for f in per_run):
                comments.append("%s per run: %s" % (name, " ".join("%.3f" % f[name] for f in per_run)))
    for comment in comments:
        print("# " + comment)


def cpu_comments(per_run):
    """How the CPU figures were measured, and how much of ckpt's CPU time its I/O workers spent."""
    if not any("save_cpu_s_per_gib" in f for f in per_run):
        return []
    shares = ["%s %.0f%%" % (phase, 100 * statistics.median(f[phase + "_worker_cpu_share"] for f in per_run))
              for phase in ("save", "load")]
    return ["cpu: user + system seconds per GiB moved; ckpt: the rank (every thread, the benchmark's memory sampler "
            "left out) and its I/O worker processes from ckpt_save until durable, and over ckpt_load; fio: its job's "
            "process over its run (usr_cpu + sys_cpu); kernel threads (a loop device's, the page cache's "
            "writeback) count for neither",
            "cpu: *_vs_fio_and_checksum: against fio's CPU time plus one pass of ckpt's block checksum over as many "
            "bytes (checksum_cpu_s_per_gib: XXH3-64 in 1 MiB blocks over memory written before, out of the cache), "
            "the verification that ckpt does and fio does not",
            "cpu: the I/O workers' share of ckpt's CPU time: " + ", ".join(shares)]


def parallel_load_comments(ordered, per_run):
    """What the parallel-load figures rest on: the transports used, and the units of ucx_perftest."""
    comments = []
    for load in RANKED_LOADS:
        used = sorted({transport_of(raw, load) for raw in ordered})
        comments.append("%s: transport %s, %d rank(s)" % (load, "/".join(used), per_rank_count(ordered[0], load)))
    if any("exchange_gbps" not in f for f in per_run):
        comments.append("exchange_gbps: the exchange load ran without a transport (CKPT_TRANSPORT, or UCX did not "
                        "load): read_amplification is that of a load without exchange")
    comments.append("load strategies chosen: " + ", ".join(
        "%s: %s" % (load, "/".join(sorted({strategy_of(raw, load) for raw in ordered})))
        for load in RANKED_LOADS + FORCED_RESHARD_LOADS if load + "_ranks" in ordered[0]))
    if any("ucx_perftest_gbps" in f for f in per_run):
        comments.append("ucx_perftest_gbps: tag_bw, 16 MiB messages, -n 100 -w 10, between two processes on "
                        "localhost; UCX 1.13 prints MB/s with MB = 2^20, converted here to GB/s = 10^9 bytes/s")
    return comments


def main(argv):
    if len(argv) == 4 and argv[1] == "fio-job" and argv[3] in ("read", "write"):
        fio_job(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "fio-copy" and argv[3].isdigit():
        fio_copy_bandwidth(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "ucx-bw" and argv[3].isdigit():
        ucx_bandwidth(argv[2], int(argv[3]))
    elif len(argv) == 6 and argv[1] == "report":
        report(argv[2], float(argv[3]), float(argv[4]), float(argv[5]))
    else:
        fail("usage: figures.py fio-job JSON_FILE read|write | fio-copy JSON_FILE BYTES | ucx-bw LOG MESSAGE_BYTES"
             " | report VALUES_FILE S_MIB D_MIB R_MIB")


if __name__ == "__main__":
    main(sys.argv)
