#!/usr/bin/env python3
"""Load test of `seglog serve`: librdkafka's producer through the wire, beside the engine's own
produce bench and fio, in the same run.

    cargo build --release -p seglog-tools --features bench
    apt-get install librdkafka-dev           # the producer below is built against it
    python3 scripts/serve-load.py --seglog target/release/seglog --dir /var/tmp/serve-load

For each repetition, first the throughput pass below against `seglog serve --discard-produce`,
which answers every produce without storing it: the wire alone (client, sockets, decoding,
answers), the most any storage behind the server could reach on this machine. Then for each I/O
mode, in turn:
  1. `seglog serve` on a fresh directory (one shard, as the bench below), and
     scripts/serve-load-producer.c (librdkafka in C: acks=all, no compression, records of
     --record-bytes packed into batches of up to 16 KiB) twice:
     - throughput: up to 256 records (64 batches) queued in the client, linger 1 ms;
     - same window: up to 32 records (8 batches), the appends in flight of the engine's bench,
       linger 0 (no wait in the client before a batch is sent: the latency is the wire's and
       the server's).
     Each gives payload MB/s from the first produce to the last delivery report, and each
     record's latency from produce to its delivery report (client queueing included). The
     batches the server stored are counted with `seglog verify` afterwards.
  2. `seglog bench --workloads produce` in the same mode with batches of the same size and
     record count (window 8) and the server's engine settings, which runs fio's equivalent job
     beside the engine.
Medians over the repetitions, and every repetition's figures, are printed (and written as JSON
with --json).
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def build_producer(scratch):
    exe = os.path.join(scratch, "serve-load-producer")
    src = os.path.join(HERE, "serve-load-producer.c")
    r = subprocess.run(["cc", "-O2", "-o", exe, src, "-lrdkafka"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("building the librdkafka producer failed (apt-get install librdkafka-dev):\n" + r.stderr)
    return exe


def start_server(seglog, data, mode, network_threads, discard=False):
    # One shard, as the engine's bench below runs.
    proc = subprocess.Popen([seglog, "serve", "--dir", data, "--listen", "127.0.0.1:0", "--io-mode", mode,
                             "--shards", "1", "--network-threads", str(network_threads)]
                            + (["--discard-produce"] if discard else []),
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"seglog serve: listening on (\S+)", line)
    if not m:
        proc.kill()
        sys.exit("unexpected first line from seglog serve: %r" % line)
    return proc, m.group(1)


def stop_server(proc):
    proc.terminate()
    rest = proc.stdout.read()
    if proc.wait() != 0 or "stopped cleanly" not in rest:
        sys.exit("seglog serve did not stop cleanly: %r" % rest)


TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pid):
    """CPU seconds (user + system) of the server so far: the whole process (threads that have
    exited included, such as io_uring's workers) and its network and shard threads."""
    def times(stat_path):
        with open(stat_path) as f:
            stat = f.read()
        # The command name may hold spaces: the fields after it start at ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        return stat[stat.index("(") + 1:stat.rindex(")")], (int(fields[11]) + int(fields[12])) / TICK
    out = {"process": times("/proc/%d/stat" % pid)[1], "net": 0.0, "shard": 0.0}
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            comm, cpu = times("/proc/%d/task/%s/stat" % (pid, task))
        except OSError:
            continue  # exited meanwhile: counted in the process's times
        if comm == "seglog-net":
            out["net"] += cpu
        elif comm.startswith("seglog-shard"):
            out["shard"] += cpu
    return out


def wire_run(producer, addr, topic, total_bytes, record_bytes, queued, linger_ms, server_pid):
    """One producer run, with the CPU it and the server took, in seconds per GiB produced."""
    n = total_bytes // record_bytes
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = server_cpu(server_pid)
    out = subprocess.run([producer, addr, topic, str(n), str(record_bytes), str(queued), str(linger_ms)],
                         capture_output=True, text=True)
    server_after = server_cpu(server_pid)
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit("the producer failed:\n" + out.stderr)
    r = json.loads(out.stdout)
    gib = n * record_bytes / (1 << 30)
    client = (client_after.ru_utime + client_after.ru_stime - client_before.ru_utime - client_before.ru_stime)
    cpu = {k: (server_after[k] - server_before[k]) / gib for k in server_after}
    cpu["client"] = client / gib
    cpu["server_other"] = cpu["process"] - cpu["net"] - cpu["shard"]
    # What the machine's cores allow at this CPU cost per byte, client and server together.
    cpu["ceiling_mb_per_s"] = os.cpu_count() / ((cpu["client"] + cpu["process"]) / (1 << 30)) / 1e6
    r["cpu_s_per_gib"] = cpu
    return r


def stored_batches(seglog, data):
    out = subprocess.run([seglog, "verify", data], capture_output=True, text=True).stdout
    m = re.search(r"Summary: .*?(\d+) batches, (\d+) records, (\d+) bytes", out)
    if not m:
        sys.exit("seglog verify gave no summary:\n" + out)
    batches, records, size = (int(x) for x in m.groups())
    # Less the two warm-up records' batches.
    batches, records = batches - 2, records - 2
    return {"batches": batches, "avg_batch_bytes": size / max(batches, 1), "records_per_batch": records / max(batches, 1)}


def engine_run(seglog, bench_dir, mode, total_bytes, records_per_batch):
    out = subprocess.run([seglog, "bench", "--dir", bench_dir, "--workloads", "produce", "--modes", mode,
                          "--reps", "1", "--bytes", str(total_bytes), "--batch-bytes", "16384",
                          "--records-per-batch", str(records_per_batch),
                          # The server's engine settings, so that only the wire differs: its
                          # segments (Kafka's default 1 GiB, no roll in either run) and no
                          # preallocation (Kafka's and the engine's default; the bench's own
                          # default preallocates, as fio's job does).
                          "--segment-bytes", str(1 << 30), "--no-preallocate", "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("seglog bench failed:\n" + out.stderr)
    row = next(r for r in json.loads(out.stdout)["summary"] if r["workload"] == "produce")
    return {k: row[k] for k in ("mb_per_s", "p50_us", "p99_us", "p999_us", "disk_mb_per_s", "disk_p99_us", "disk_job")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seglog", default="target/release/seglog", help="a seglog built with --features bench")
    ap.add_argument("--dir", default="/var/tmp/serve-load", help="scratch directory on the disk measured")
    ap.add_argument("--mb", type=int, default=1024, help="MiB produced per pass")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="direct,buffered")
    ap.add_argument("--record-bytes", type=int, default=4000, help="4 records fill a 16 KiB batch")
    ap.add_argument("--network-threads", type=int, default=1, help="the server's --network-threads")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    total = a.mb << 20
    modes = a.modes.split(",")
    os.makedirs(a.dir, exist_ok=True)
    producer = build_producer(a.dir)
    runs = []
    for rep in range(a.reps):
        data = os.path.join(a.dir, "serve-discard-%d" % rep)
        shutil.rmtree(data, ignore_errors=True)
        proc, addr = start_server(a.seglog, data, modes[0], a.network_threads, discard=True)
        try:
            wire = wire_run(producer, addr, "load", total, a.record_bytes, 256, 1, proc.pid)
        finally:
            stop_server(proc)
        shutil.rmtree(data, ignore_errors=True)
        alone = wire
        c = wire["cpu_s_per_gib"]
        print("rep %d the wire alone (nothing stored): %4.0f MB/s (p99 %5.1f ms); CPU s per GiB: client %.2f,"
              " server %.2f" % (rep, wire["mb_per_s"], wire["p99_us"] / 1000, c["client"], c["process"]), flush=True)
        for mode in modes:
            data = os.path.join(a.dir, "serve-%s-%d" % (mode, rep))
            shutil.rmtree(data, ignore_errors=True)
            proc, addr = start_server(a.seglog, data, mode, a.network_threads)
            try:
                wire = wire_run(producer, addr, "load", total, a.record_bytes, 256, 1, proc.pid)
                window = wire_run(producer, addr, "load-window", total, a.record_bytes, 32, 0, proc.pid)
            finally:
                stop_server(proc)
            stored = stored_batches(a.seglog, data)
            shutil.rmtree(data, ignore_errors=True)
            rpb = max(1, round(stored["records_per_batch"]))
            engine = engine_run(a.seglog, os.path.join(a.dir, "bench"), mode, total, rpb)
            run = {"rep": rep, "mode": mode, "wire": wire, "window": window, "stored": stored, "engine": engine,
                   "wire_alone": alone}
            runs.append(run)
            print("rep %d %-8s wire %4.0f MB/s (p99 %5.1f ms) | window 8: %4.0f MB/s p50 %4.2f p99 %5.2f ms"
                  " | engine %4.0f MB/s p50 %4.2f p99 %4.2f ms | fio %4.0f MB/s | %.0f B batches, %.1f records" % (
                      rep, mode, wire["mb_per_s"], wire["p99_us"] / 1000, window["mb_per_s"], window["p50_us"] / 1000,
                      window["p99_us"] / 1000, engine["mb_per_s"], engine["p50_us"] / 1000, engine["p99_us"] / 1000,
                      engine["disk_mb_per_s"], stored["avg_batch_bytes"], stored["records_per_batch"]),
                  flush=True)
            c = wire["cpu_s_per_gib"]
            print("      CPU s per GiB: client %.2f, server %.2f (network thread %.2f, shard %.2f, other %.2f);"
                  " %d cores at that cost: %.0f MB/s = %.2fx the engine" % (
                      c["client"], c["process"], c["net"], c["shard"], c["server_other"], os.cpu_count(),
                      c["ceiling_mb_per_s"], c["ceiling_mb_per_s"] / engine["mb_per_s"]), flush=True)
    print()
    print("| mode | wire MB/s | engine MB/s | wire / engine | fio MB/s | window 8: wire MB/s | wire p50 | wire p99 |"
          " engine p50 | engine p99 | added p99 | CPU s/GiB client, server | cores' ceiling / engine |"
          " wire alone MB/s | wire alone / engine |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        rs = [r for r in runs if r["mode"] == mode]

        def med(f):
            return statistics.median(f(r) for r in rs)
        ratios = sorted(r["wire"]["mb_per_s"] / r["engine"]["mb_per_s"] for r in rs)
        print("| %s | %.0f | %.0f | %.2fx (%.2f-%.2f) | %.0f | %.0f | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |"
              " %.2f, %.2f | %.2fx | %.0f | %.2fx |" % (
            mode, med(lambda r: r["wire"]["mb_per_s"]), med(lambda r: r["engine"]["mb_per_s"]),
            statistics.median(ratios), ratios[0], ratios[-1], med(lambda r: r["engine"]["disk_mb_per_s"]),
            med(lambda r: r["window"]["mb_per_s"]), med(lambda r: r["window"]["p50_us"]) / 1000,
            med(lambda r: r["window"]["p99_us"]) / 1000, med(lambda r: r["engine"]["p50_us"]) / 1000,
            med(lambda r: r["engine"]["p99_us"]) / 1000,
            med(lambda r: r["window"]["p99_us"] - r["engine"]["p99_us"]) / 1000,
            med(lambda r: r["wire"]["cpu_s_per_gib"]["client"]), med(lambda r: r["wire"]["cpu_s_per_gib"]["process"]),
            med(lambda r: r["wire"]["cpu_s_per_gib"]["ceiling_mb_per_s"] / r["engine"]["mb_per_s"]),
            med(lambda r: r["wire_alone"]["mb_per_s"]), med(lambda r: r["wire_alone"]["mb_per_s"] / r["engine"]["mb_per_s"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
