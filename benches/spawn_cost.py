#!/usr/bin/env python3
"""What starting a process costs a parent that holds N MiB, by fork (what a
`pre_exec` hook forces in Rust's std, as `preexec_fn` does here) and by
vfork/posix_spawn (what std uses without one, as `start_new_session` does
here): issue #35, docs/benchmarks.md. Usage: python3 benches/spawn_cost.py 30 230
"""
import os
import resource
import subprocess
import sys
import time

SPAWNS = 100


def measure(heap, **how):
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.time()
    for _ in range(SPAWNS):
        subprocess.run(["/bin/true"], check=True, **how)
        # The parent goes on writing to its memory, as the harness does.
        for block in heap[: len(heap) // 4]:
            block[0] = 2
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return (
        (time.time() - started) * 1000 / SPAWNS,
        cpu * 1000 / SPAWNS,
        (after.ru_minflt - before.ru_minflt) / SPAWNS,
    )


for mib in map(int, sys.argv[1:] or ["30", "230"]):
    heap = [bytearray(1 << 20) for _ in range(mib)]
    for block in heap:
        for i in range(0, len(block), 4096):
            block[i] = 1
    for name, how in [("fork", {"preexec_fn": os.setsid}), ("posix_spawn", {"start_new_session": True})]:
        wall, cpu, faults = measure(heap, **how)
        print(f"{mib} MiB, {name}: {wall:.2f} ms a spawn, parent CPU {cpu:.2f} ms, {faults:.0f} page faults")
