#!/usr/bin/env python3
"""What one file gives durable writes of one size, three ways (docs/benchmarks.md, "What bounds
1 x 8 on this disk").

    python3 scripts/one-file-dsync-probe.py DIR [--bytes 65536] [--total-mib 128] [--rounds 2]

Writes `--total-mib` of `--bytes` O_DIRECT + O_DSYNC writes, in file order, into a file in DIR
that was written once beforehand (so every write is an overwrite, as an append over zero fill's
zeros is), and prints MB/s and the write latency p50/p99 of each way, alternated for `--rounds`:

- `serial`: one write in flight, the next issued when it completes: the engine's one durable
  write in flight per partition.
- `depth2`: two writes in flight (two threads taking the next offset): fio's job at 1 partition
  x 8 appends of 16 KB in flight (64 KiB writes, two in flight).
- `patched`: two logical writes in flight on one file where appends do not end on a block
  boundary: write k covers its bytes from the block after the one write k-1 ends in, and that
  shared block is rewritten (4 KiB, O_DSYNC) once write k-1 completes; a logical write is done
  when both are. Two O_DIRECT writes of one block in flight could land in either order, so the
  block can only be written after the write before it.

Threads release the GIL in pwrite, so the device sees the depth asked for; the figures are the
device's, not the engine's. `patched` starts a thread per logical write: about 100 us to start
and join one in CPython here, against its 0.6 ms per logical write, so part of its shortfall may
be the probe's own; two durable writes per logical write explain the rest. DIR must not be tmpfs (O_DIRECT there is a memory copy). The file
(`one-file-dsync-probe.dat`) is removed at the end.
"""

import argparse
import mmap
import os
import threading
import time

BLOCK = 4096


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def serial(fd, buf, size, count):
    lat = []
    for k in range(count):
        t = time.perf_counter()
        os.pwrite(fd, buf, k * size)
        lat.append(time.perf_counter() - t)
    return lat


def depth2(fd, buf, size, count):
    lat, lock, next_k = [], threading.Lock(), [0]

    def worker():
        mine = mmap.mmap(-1, size)
        mine.write(buf)
        while True:
            with lock:
                k = next_k[0]
                next_k[0] += 1
            if k >= count:
                return
            t = time.perf_counter()
            os.pwrite(fd, mine, k * size)
            d = time.perf_counter() - t
            with lock:
                lat.append(d)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return lat


def patched(fd, buf, size, count):
    view = memoryview(buf)
    body, head = view[BLOCK:], view[:BLOCK]
    body_done = [threading.Event() for _ in range(count)]
    slots = threading.Semaphore(2)
    lat, lock = [], threading.Lock()

    def logical(k, started):
        os.pwrite(fd, body, k * size + BLOCK)
        body_done[k].set()
        if k > 0:
            body_done[k - 1].wait()
        os.pwrite(fd, head, k * size)
        d = time.perf_counter() - started
        with lock:
            lat.append(d)
        slots.release()

    running = []
    for k in range(count):
        slots.acquire()
        th = threading.Thread(target=logical, args=(k, time.perf_counter()))
        th.start()
        running.append(th)
        if len(running) > 4:
            running.pop(0).join()
    for th in running:
        th.join()
    return lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--bytes", type=int, default=65536, help="bytes per write (a multiple of 4096)")
    ap.add_argument("--total-mib", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.bytes % BLOCK or a.bytes <= BLOCK:
        ap.error("--bytes must be a multiple of 4096 above 4096")
    count = (a.total_mib << 20) // a.bytes
    path = os.path.join(a.dir, "one-file-dsync-probe.dat")
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        for _ in range((count * a.bytes + len(chunk) - 1) // len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    buf = mmap.mmap(-1, a.bytes)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * a.bytes)
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    try:
        for r in range(a.rounds):
            for name, way in (("serial", serial), ("depth2", depth2), ("patched", patched)):
                t = time.perf_counter()
                lat = sorted(way(fd, buf, a.bytes, count))
                secs = time.perf_counter() - t
                print(
                    f"round {r + 1} {name:8} {count * a.bytes / secs / 1e6:6.0f} MB/s"
                    f"  p50 {percentile(lat, 0.5) * 1e6:6.0f} us  p99 {percentile(lat, 0.99) * 1e6:6.0f} us",
                    flush=True,
                )
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
