#!/usr/bin/env python3
"""Measuring and arithmetic for bench/s3, standard library only.

  s3_figures.py measure VALUES RUN PHASE SERVER_DIR BYTES -- COMMAND...
        runs COMMAND (its output goes where this script's goes) and appends to VALUES, as `RUN PHASE_<x> value`
        lines: its wall time (seconds), the user + system CPU time of COMMAND and every descendant it waited for
        (cpu_seconds), the CPU time of the S3 server's daemons over the same interval (server_cpu_seconds), that of
        the whole machine (machine_cpu_seconds: other users' load shows as the difference), the requests the
        gateway served (requests) and BYTES, the bytes the phase moved to or from the server (bytes); exits with
        COMMAND's status
  s3_figures.py report VALUES S_MIB R_MIB
        turns the per-run values into figures beside their baselines: medians, then `#` lines with every run's
        values

The server is tools/s3_server.sh's: its daemons' pid files lie in SERVER_DIR/run (mon.a, osd.0, client.rgw) and
radosgw answers `perf dump` on SERVER_DIR/run/rgw.asok. Where either is missing, the server's CPU time or its request
count is left out of VALUES, and the report says so.
"""
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time

import figures  # bench/figures.py, beside this file

GIB = figures.GIB
SERVER_DAEMONS = ("mon.a", "osd.0", "client.rgw")
ADMIN_SOCKET_TIMEOUT_S = 10

# (name, unit, format) in the order they are printed: each group is ckpt's figure, its rclone baseline of the same
# run, and their ratio, ckpt's over rclone's, as bench/figures.py divides (throughput above 1: ckpt is faster; CPU
# time per GiB below 1: ckpt spends less).
FIGURES = [
    ("s3_save_gibps", "GiB/s", "%.3f"),
    ("rclone_upload_gibps", "GiB/s", "%.3f"),
    ("s3_save_vs_baseline", "ratio", "%.3f"),
    ("s3_save_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("rclone_upload_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("s3_save_cpu_vs_baseline", "ratio", "%.3f"),
    ("s3_load_gibps", "GiB/s", "%.3f"),
    ("rclone_download_gibps", "GiB/s", "%.3f"),
    ("s3_load_vs_baseline", "ratio", "%.3f"),
    ("s3_load_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("rclone_download_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("s3_load_cpu_vs_baseline", "ratio", "%.3f"),
    ("s3_reshard_load_gibps", "GiB/s", "%.3f"),
    ("rclone_reshard_download_gibps", "GiB/s", "%.3f"),
    ("s3_reshard_load_vs_baseline", "ratio", "%.3f"),
    # Context: a training loop's later saves (the second save of the same state, warm arena), and how long the
    # first ckpt_save blocked the caller.
    ("s3_save_warm_gibps", "GiB/s", "%.3f"),
    # rclone's upload without the whole-file MD5 it stores as metadata (--s3-disable-checksum), which for a
    # multipart upload it computes in a pass over the file before uploading.
    ("rclone_upload_no_checksum_gibps", "GiB/s", "%.3f"),
    ("rclone_upload_no_checksum_cpu_s_per_gib", "s/GiB", "%.3f"),
    ("s3_save_block_ms", "ms", "%.1f"),
    ("s3_reshard_read_amplification", "ratio", "%.2f"),
    # The server's CPU time per GiB each phase moved: what each client's requests cost the server.
    ("server_cpu_s_per_gib_rclone_upload", "s/GiB", "%.3f"),
    ("server_cpu_s_per_gib_s3_save", "s/GiB", "%.3f"),
    ("server_cpu_s_per_gib_rclone_download", "s/GiB", "%.3f"),
    ("server_cpu_s_per_gib_s3_load", "s/GiB", "%.3f"),
    ("server_cpu_s_per_gib_rclone_reshard_download", "s/GiB", "%.3f"),
    ("server_cpu_s_per_gib_s3_reshard_load", "s/GiB", "%.3f"),
]
# Ratios whose every run is printed, so that a median hiding a spread shows it.
PER_RUN = ("s3_save_vs_baseline", "s3_save_cpu_vs_baseline", "s3_load_vs_baseline", "s3_load_cpu_vs_baseline",
           "s3_reshard_load_vs_baseline", "s3_save_gibps", "rclone_upload_gibps", "s3_load_gibps",
           "rclone_download_gibps", "s3_reshard_load_gibps", "rclone_reshard_download_gibps")
# The measured phases (as bench/s3 names them), in the order they run, and what they are called in comments.
PHASES = [
    ("rclone_upload_no_checksum", "rclone upload --s3-disable-checksum"),
    ("rclone_upload", "rclone upload"),
    ("s3_save", "ckpt save (and its warm second save)"),
    ("rclone_download", "rclone download"),
    ("s3_load", "ckpt load"),
    ("rclone_reshard_download", "rclone download of the reshard checkpoint"),
    ("s3_reshard_load", "ckpt reshard load"),
]


def fail(message):
    sys.stderr.write("s3_figures.py: %s\n" % message)
    sys.exit(1)


def process_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` (every thread), from /proc/<pid>/stat; None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as f:
            line = f.read()
    except OSError:
        return None
    # The command name is parenthesised and may contain ") ": utime and stime are fields 14 and 15, counted from
    # the state, the first field after the last ") ".
    fields = line[line.rfind(") ") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds():
    """CPU seconds all of the machine's cores have spent busy so far (every /proc/stat column but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()
    ticks = [int(t) for t in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(server_dir):
    """The CPU seconds the server's daemons have spent so far; None where a daemon cannot be read."""
    total = 0.0
    for daemon in SERVER_DAEMONS:
        try:
            with open(os.path.join(server_dir, "run", daemon + ".pid"), encoding="ascii") as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        seconds = process_cpu_seconds(pid)
        if seconds is None:
            return None
        total += seconds
    return total


def admin_socket_request(path, prefix):
    """A command to a Ceph daemon's admin socket, as the `ceph daemon` tool sends it: JSON ended by a NUL byte; the
    answer is a 4-byte big-endian length, then as many bytes of JSON."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(ADMIN_SOCKET_TIMEOUT_S)
        s.connect(path)
        s.sendall(json.dumps({"prefix": prefix}).encode() + b"\0")
        header = receive_exactly(s, 4)
        return json.loads(receive_exactly(s, struct.unpack(">I", header)[0]))


def receive_exactly(s, count):
    data = b""
    while len(data) < count:
        chunk = s.recv(count - len(data))
        if not chunk:
            raise OSError("the admin socket closed after %d of %d bytes" % (len(data), count))
        data += chunk
    return data


def gateway_requests(server_dir):
    """How many requests radosgw has served so far (its `rgw.req` counter); None where it does not answer."""
    try:
        return int(admin_socket_request(os.path.join(server_dir, "run", "rgw.asok"), "perf dump")["rgw"]["req"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure(values_path, run, phase, server_dir, moved_bytes, command):
    """Runs `command`, then appends its wall time, its CPU time and the server's over it to VALUES."""
    server_before, requests_before = server_cpu_seconds(server_dir), gateway_requests(server_dir)
    busy_before = machine_busy_seconds()
    started = time.monotonic()
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        fail("cannot run %s: %s" % (command[0], e))
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - started
    busy_seconds = machine_busy_seconds() - busy_before
    child.returncode = os.waitstatus_to_exitcode(status)
    server_after, requests_after = server_cpu_seconds(server_dir), gateway_requests(server_dir)
    lines = ["seconds %.6f" % seconds, "cpu_seconds %.6f" % (usage.ru_utime + usage.ru_stime),
             "bytes %d" % moved_bytes, "machine_cpu_seconds %.6f" % busy_seconds]
    if server_before is not None and server_after is not None:
        lines.append("server_cpu_seconds %.6f" % (server_after - server_before))
    if requests_before is not None and requests_after is not None:
        # The counter's own `perf dump` is not an S3 request: only S3 requests count.
        lines.append("requests %d" % (requests_after - requests_before))
    with open(values_path, "a", encoding="ascii") as f:
        for line in lines:
            f.write("%s %s_%s\n" % (run, phase, line))
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def read_values(path):
    """[{name: value}] from `run name value` lines (bench/figures.py reads them), runs in order."""
    runs = figures.read_values(path)
    return [runs[r] for r in sorted(runs, key=int)]


def need(raw, name):
    """A raw value of one run; a missing one names itself, a duration must be positive."""
    if name not in raw:
        fail("no %s was measured" % name)
    if raw[name] <= 0 and name.endswith("seconds"):
        fail("%s is %s, not a positive duration" % (name, raw[name]))
    return raw[name]


def ranks_of(raw, load):
    count = int(need(raw, load + "_ranks"))
    if count < 1:
        fail("%s_ranks is %d" % (load, count))
    return count


def run_figures(raw, state_gib, reshard_gib):
    """The figures of one run: ckpt's own times (ckpt_bench's save_seconds: until the commit; load_seconds; the
    slowest rank's reshard load) beside rclone's wall time moving the same bytes."""
    f = {}
    for ckpt, rclone in (("save", "upload"), ("load", "download")):
        # s3_<ckpt>_gibps beside rclone_<rclone>_gibps, then the CPU seconds per GiB of each, each pair's ratio.
        mine, theirs = "s3_%s" % ckpt, "rclone_%s" % rclone
        f[mine + "_gibps"] = state_gib / need(raw, ckpt + "_seconds")
        f[theirs + "_gibps"] = state_gib / need(raw, theirs + "_seconds")
        f[mine + "_vs_baseline"] = f[mine + "_gibps"] / f[theirs + "_gibps"]
        f[mine + "_cpu_s_per_gib"] = need(raw, ckpt + "_cpu_seconds") / state_gib
        f[theirs + "_cpu_s_per_gib"] = need(raw, theirs + "_cpu_seconds") / state_gib
        f[mine + "_cpu_vs_baseline"] = f[mine + "_cpu_s_per_gib"] / f[theirs + "_cpu_s_per_gib"]
    ranks = range(ranks_of(raw, "reshard_load"))
    reshard_s = max(need(raw, "reshard_load_seconds.rank%d" % r) for r in ranks)
    f["s3_reshard_load_gibps"] = reshard_gib / reshard_s
    f["rclone_reshard_download_gibps"] = reshard_gib / need(raw, "rclone_reshard_download_seconds")
    f["s3_reshard_load_vs_baseline"] = f["s3_reshard_load_gibps"] / f["rclone_reshard_download_gibps"]
    f["s3_reshard_read_amplification"] = (sum(need(raw, "reshard_load_bytes_read.rank%d" % r) for r in ranks) /
                                          (reshard_gib * GIB))
    f["s3_save_warm_gibps"] = state_gib / need(raw, "warm_save_seconds")
    f["s3_save_block_ms"] = need(raw, "async_block_first_ms")
    f["rclone_upload_no_checksum_gibps"] = state_gib / need(raw, "rclone_upload_no_checksum_seconds")
    f["rclone_upload_no_checksum_cpu_s_per_gib"] = need(raw, "rclone_upload_no_checksum_cpu_seconds") / state_gib
    for phase, _ in PHASES:
        if phase + "_server_cpu_seconds" in raw:
            f["server_cpu_s_per_gib_" + phase] = (raw[phase + "_server_cpu_seconds"] /
                                                  (need(raw, phase + "_bytes") / GIB))
    return f


def phase_comments(per_run_raw, cores):
    """Per phase, medians over the runs: how many of the machine's cores were busy, and with what (the client: the
    measured command and its children; the server's daemons; everything else on the machine), and how many
    requests the gateway served."""
    comments = []
    for phase, title in PHASES:
        raws = [raw for raw in per_run_raw if phase + "_seconds" in raw]
        if not raws:
            continue

        def cores_busy(share):
            return statistics.median(share(raw) / raw[phase + "_seconds"] for raw in raws)

        parts = ["client %.2f" % cores_busy(lambda raw: raw[phase + "_cpu_seconds"])]
        if all(phase + "_server_cpu_seconds" in raw for raw in raws):
            parts.append("server %.2f" % cores_busy(lambda raw: raw[phase + "_server_cpu_seconds"]))
            parts.append("others %.2f" % cores_busy(lambda raw: max(0.0, raw[phase + "_machine_cpu_seconds"] -
                                                                  raw[phase + "_cpu_seconds"] -
                                                                  raw[phase + "_server_cpu_seconds"])))
        seconds = statistics.median(raw[phase + "_seconds"] for raw in raws)
        line = "%s: %.2f s; cores busy (of %d): %s" % (title, seconds, cores, ", ".join(parts))
        if all(phase + "_requests" in raw for raw in raws):
            line += "; %d S3 requests" % statistics.median(raw[phase + "_requests"] for raw in raws)
        comments.append(line)
    return comments


def report(path, state_mib, reshard_mib):
    per_run_raw = read_values(path)
    if not per_run_raw:
        fail("%s holds no measurements" % path)
    per_run = [run_figures(raw, state_mib / 1024.0, reshard_mib / 1024.0) for raw in per_run_raw]
    for name, unit, fmt in FIGURES:
        values = [f[name] for f in per_run if name in f]
        if len(values) == len(per_run):
            print("%s %s %s" % (name, fmt % statistics.median(values), unit))
    comments = ["ratios: ckpt's figure over rclone's: *_vs_baseline above 1, ckpt is faster; *_cpu_vs_baseline below "
                "1, ckpt spends less CPU time per GiB",
                "cpu: user + system seconds per GiB moved; ckpt: the rank (every thread) and its I/O worker processes, "
                "from ckpt_save until committed and over ckpt_load; rclone: its process over its run; the server's "
                "daemons (radosgw, ceph-osd, ceph-mon) count for neither"]
    if any("server_cpu_s_per_gib_s3_save" not in f for f in per_run):
        comments.append("server CPU: the daemons' pid files were not readable; server figures left out")
    else:
        comments.append("server_cpu_s_per_gib: the daemons' CPU time over the whole phase (the ckpt save phase: two "
                        "saves, 2 S moved; each ckpt phase also spans the launch and context set-up) per GiB moved")
    comments.append("cores busy: the client is the measured command with its children (for ckpt: the launcher and its "
                    "ranks, filling and checking the state included), the server its daemons, others the rest of "
                    "the machine's busy time")
    comments.extend(phase_comments(per_run_raw, os.cpu_count()))
    transports = {figures.TRANSPORTS.get(int(raw.get("reshard_load_transport.rank0", 0)), "unknown") for raw in per_run_raw}
    comments.append("reshard load: %d rank(s), transport %s" % (ranks_of(per_run_raw[0], "reshard_load"),
                                                               "/".join(sorted(transports))))
    for name in PER_RUN:
        comments.append("%s per run: %s" % (name, " ".join("%.3f" % f[name] for f in per_run)))
    for comment in comments:
        print("# " + comment)


def main(argv):
    if len(argv) >= 9 and argv[1] == "measure" and argv[7] == "--" and argv[6].isdigit():
        sys.exit(measure(argv[2], argv[3], argv[4], argv[5], int(argv[6]), argv[8:]))
    elif len(argv) == 5 and argv[1] == "report":
        report(argv[2], float(argv[3]), float(argv[4]))
    else:
        fail("usage: s3_figures.py measure VALUES RUN PHASE SERVER_DIR BYTES -- COMMAND... | "
             "report VALUES S_MIB R_MIB")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except KeyboardInterrupt:
        sys.exit(130)
