"""Micro-benchmark of the log hot paths (not collected by pytest).

    .venv/bin/python tests/log/bench_log.py [--batches N] [--dir PATH]

Appends pre-built client batches (10 records of 1 KiB each, ~10 KiB per batch) and reads them back the way
consumers do; also small single-record batches (a group commit's size). Data goes to the page cache: no
fsync, as with Kafka's defaults.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from regroup.log.config import LogConfig
from regroup.log.partition import PartitionLog
from regroup.protocol.record_batch import Record, build_batch


def client_batches(count: int, records: int, size: int, *, idempotent: bool = False) -> list[bytes]:
    value = bytes(random.Random(1).randbytes(size))
    out = []
    for i in range(count):
        recs = [Record(j, 1_700_000_000_000 + i, b"key-%d" % j, value, []) for j in range(records)]
        if idempotent:
            out.append(build_batch(recs, producer_id=7, producer_epoch=0, base_sequence=i * records))
        else:
            out.append(build_batch(recs))
    return out


def bench_append(
    directory: Path, batches: list[bytes], records: int, config: LogConfig, label: str
) -> PartitionLog:
    shutil.rmtree(directory, ignore_errors=True)
    plog = PartitionLog.open(directory, config)
    total = sum(len(b) for b in batches)
    started = time.perf_counter()
    for b in batches:
        plog.append(b, now_ms=1_700_000_000_000)
    elapsed = time.perf_counter() - started
    rate = len(batches) / elapsed
    print(
        f"append {label:<24} {rate:>9,.0f} appends/s {rate * records:>10,.0f} records/s"
        f" {total / elapsed / 1e6:>7.1f} MB/s  ({plog.segment_count} segments)"
    )
    return plog


def bench_reads(plog: PartitionLog) -> None:
    end = plog.log_end_offset
    for max_bytes in (1 << 20, 64 << 10):
        offset = 0
        total = 0
        reads = 0
        started = time.perf_counter()
        while offset < end:
            res = plog.read(offset, max_bytes)
            total += len(res.data)
            reads += 1
            offset = _next_offset(res.data)  # a consumer continues after the last batch it got
        elapsed = time.perf_counter() - started
        print(
            f"read   sequential max_bytes={max_bytes >> 10:>5} KiB {reads / elapsed:>10,.0f} reads/s"
            f" {total / elapsed / 1e6:>8.1f} MB/s"
        )
    rng = random.Random(2)
    offsets = [rng.randrange(end) for _ in range(20_000)]
    started = time.perf_counter()
    for o in offsets:
        plog.read(o, 1)
    elapsed = time.perf_counter() - started
    print(f"read   random offset, one batch    {len(offsets) / elapsed:>10,.0f} reads/s")
    started = time.perf_counter()
    for _ in range(100_000):
        plog.read(end, 1 << 20)
    elapsed = time.perf_counter() - started
    print(f"read   at the log end (tailing)    {100_000 / elapsed:>10,.0f} reads/s")


def _next_offset(data: bytes) -> int:
    import struct

    pos = 0
    last = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        last = base + delta
        pos += 12 + length
    return last + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="regroup-bench-"))
    try:
        big = client_batches(args.batches, 10, 1024)
        config = LogConfig(segment_bytes=256 << 20)
        plog = bench_append(root / "t-0", big, 10, config, "10x1KiB CreateTime")
        bench_reads(plog)
        plog.close()
        lat = LogConfig(segment_bytes=256 << 20, message_timestamp_type="LogAppendTime")
        bench_append(root / "t-1", big, 10, lat, "10x1KiB LogAppendTime").close()
        idem = client_batches(args.batches, 10, 1024, idempotent=True)
        bench_append(root / "t-2", idem, 10, config, "10x1KiB idempotent").close()
        small = client_batches(args.batches * 5, 1, 100)
        bench_append(root / "t-3", small, 1, config, "1x100B (commit-sized)").close()
        started = time.perf_counter()
        reopened = PartitionLog.open(root / "t-0", config)
        elapsed = time.perf_counter() - started
        print(
            f"open   unclean, full CRC recovery   {elapsed:>10.3f} s for {reopened.size_bytes / 1e6:.0f} MB"
        )
        reopened.close()
        started = time.perf_counter()
        reopened = PartitionLog.open(root / "t-0", config, clean_shutdown=True)
        print(f"open   clean                        {time.perf_counter() - started:>10.3f} s")
        reopened.close()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
