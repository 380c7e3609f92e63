#!/usr/bin/env python3
"""Markdown tables from `seglog-bench --json` output, as docs/benchmarks.md shows them.

    target/release/seglog-bench --profile full --plot docs/bench --json > bench.json
    python3 scripts/bench-tables.py bench.json

Prints three tables: "All runs" (every workload row, medians over the repetitions), "Against
the reference designs" and "Lookup cost vs index.interval.bytes". Numbers are formatted as the bench's own text summary does
(`num` in bench/src/cli.rs): 0 is "-", three significant figures below 100, whole numbers above.
"""

import json
import sys


def num(v):
    if v is None or v == 0:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def disk(row):
    job = row.get("disk_job") or ""
    if not job:
        return "-"
    if "fdatasync" in job:
        return f"fdatasync p99 {num(row['disk_p99_us'])} µs ({job})"
    if "rand" in job:
        return f"p50 {num(row['disk_p50_us'])} µs ({job})"
    return f"{num(row['disk_mb_per_s'])} MB/s ({job})"


def table(headers, align, rows):
    """A markdown table; `align` has an "l" (text) or "r" (number) per column."""
    align = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def all_runs(summary):
    headers = ["workload", "system", "mode", "MB/s", "records/s", "p50 µs", "p99 µs", "p99.9 µs", "max µs",
               "write p50 / p99 µs", "enters/op", "I/Os/op", "CPU s/GB", "disk (fio, same rep)", "seglog / disk"]
    rows = []
    for r in summary:
        write = "-"
        if r.get("write_p99_us"):
            write = f"{num(r['write_p50_us'])} / {num(r['write_p99_us'])}"
        ratio = r.get("ratio_to_disk")
        rows.append([
            r["workload"], r["system"], r["mode"],
            num(r["mb_per_s"]), num(r["records_per_s"]),
            num(r["p50_us"]), num(r["p99_us"]), num(r["p999_us"]), num(r["max_us"]),
            write,
            num(r["enters_per_op"]), num(r["ios_per_op"]), num(r["cpu_s_per_gb"]),
            disk(r),
            "-" if ratio is None else f"{100 * ratio:.0f}%",
        ])
    return table(headers, "lllrrrrrrrrrrlr", rows)


def references(refs):
    headers = ["workload", "seglog mode", "reference", "figure", "seglog", "reference", "seglog / reference"]
    rows = [[r["workload"], r["seglog_mode"], r["reference"], r["figure"],
             num(r["seglog"]), num(r["other"]), f"{r['ratio']:.2f}"] for r in refs]
    return table(headers, "llllrrr", rows)


def intervals(points):
    headers = ["index.interval.bytes", "index entries", "p50 ns", "p99 ns", "bytes walked (mean)", "hops (mean)"]
    rows = [[str(p["index_interval_bytes"]), str(p["index_entries"]), f"{p['lookup_p50_ns']:.0f}",
             f"{p['lookup_p99_ns']:.0f}", f"{p['mean_bytes_scanned']:.0f}", f"{p['mean_hops']:.1f}"]
            for p in points]
    return table(headers, "rrrrrr", rows)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench-tables.py BENCH_JSON")
    with open(sys.argv[1]) as f:
        results = json.load(f)
    print("## All runs\n")
    print(all_runs(results["summary"]))
    print("\n## Against the reference designs\n")
    print(references(results["references"]))
    if results.get("intervals"):
        print("\n## Lookup cost vs index.interval.bytes\n")
        print(intervals(results["intervals"]))


if __name__ == "__main__":
    main()
