#!/usr/bin/env python3
"""Replays the trials recorded in a workspace's results/run.json directly, without
the harness: the same argv, environment and working directory, one after the
other, with raw profiles written to a scratch folder (so the instrumented
library pays the same profile-writing cost). Prints, as JSON, the harness's
summed trial wall time, the direct wall time and their ratio; and the harness's
span (first trial's start to last trial's end), which also counts what happens
between trials (slot hand-over, result writes), against the direct wall time,
and the time between trials (span minus trial time): the span figures mean
something only when the harness ran trials one at a time (each takes the whole
rank capacity, or `--test-threads 1`).

Usage: benches/replay_direct.py <workspace> [--filter SUBSTRING]

Run it right after `ccl-coverage collectives` in the same session, so both
measurements see the same machine and the same build.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    workspace = os.path.abspath(sys.argv[1])
    needle = sys.argv[sys.argv.index("--filter") + 1] if "--filter" in sys.argv else ""
    run = json.load(open(os.path.join(workspace, "results", "run.json")))
    scratch = tempfile.mkdtemp(prefix="ccl-cov-replay-")
    rows = []
    for trial in run["trials"]:
        if needle not in trial["trial"]:
            continue
        env = dict(os.environ)
        env.pop("__LLVM_PROFILE_RT_INIT_ONCE", None)
        for key, value in trial["env"]:
            env[key] = value
        if "LLVM_PROFILE_FILE" in env:
            folder = os.path.join(scratch, trial["slug"])
            os.makedirs(folder, exist_ok=True)
            env["LLVM_PROFILE_FILE"] = os.path.join(folder, os.path.basename(env["LLVM_PROFILE_FILE"]))
        started = time.monotonic()
        done = subprocess.run(trial["argv"], cwd=trial["cwd"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        direct = time.monotonic() - started
        rows.append({"trial": trial["trial"], "harness_s": round(trial["duration_s"], 3),
                     "direct_s": round(direct, 3), "direct_exit": done.returncode,
                     "harness_status": trial["status"]})
    shutil.rmtree(scratch, ignore_errors=True)
    harness = sum(r["harness_s"] for r in rows)
    direct = sum(r["direct_s"] for r in rows)
    chosen = [t for t in run["trials"] if needle in t["trial"]]
    span = (max(t["started_unix_ms"] / 1000 + t["duration_s"] for t in chosen)
            - min(t["started_unix_ms"] / 1000 for t in chosen)) if chosen else 0
    print(json.dumps({"trials": rows, "harness_total_s": round(harness, 3),
                      "direct_total_s": round(direct, 3),
                      "ratio": round(harness / direct, 4) if direct else None,
                      "harness_span_s": round(span, 3),
                      "between_trials_s": round(span - harness, 3),
                      "span_ratio": round(span / direct, 4) if direct else None}, indent=1))


if __name__ == "__main__":
    main()
