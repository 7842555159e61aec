#!/usr/bin/env python3
"""What device coverage costs a trial, side by side on one machine (issue #42): every trial of
a device-coverage run is replayed from its record (results/run.json: argv, environment,
working directory) in each mode, the modes alternating trial by trial, for several rounds.

    host   the record without the collector (CUDA_INJECTION64_PATH, CCL_COV_SASS_* and the
           CUDA_MODULE_LOADING=EAGER it asks for left out), as a host-only run sets them
    three  the record as the harness ran it: its collector, three SASS metrics
    one    the same with --one-metric's collector (a build that configures the first metric only)

Records and raw profiles go to a scratch folder, never into the workspace. A run that exits
non-zero, or a collector run that wrote no record saying `metrics N of 3`, stops the
measurement with the trial, mode and why. Prints JSON: every run's wall time, and per size
(the trial name's second part) and overall, each mode's summed time and its ratio to host-only.

Usage: benches/replay_device_cost.py <workspace> [--rounds N] [--one-metric LIB] [--filter SUBSTRING]
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

COLLECTOR = ("CUDA_INJECTION64_PATH", "CUDA_MODULE_LOADING", "CCL_COV_SASS_DIR", "CCL_COV_SASS_CUBINS", "CCL_COV_SASS_KERNELS",
             "CCL_COV_SASS_MAX_LAUNCHES")
METRICS = {"three": 3, "one": 1}


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def replay(trial, mode, scratch, one_metric):
    env = dict(os.environ)
    env.pop("__LLVM_PROFILE_RT_INIT_ONCE", None)
    for key, value in trial["env"]:
        env[key] = value
    if "CUDA_INJECTION64_PATH" not in env:
        sys.exit(f"{trial['trial']}: its record has no collector (CUDA_INJECTION64_PATH): not a device-coverage run")
    folder = tempfile.mkdtemp(prefix=f"{trial['slug']}-{mode}-", dir=scratch)
    if "LLVM_PROFILE_FILE" in env:
        env["LLVM_PROFILE_FILE"] = os.path.join(folder, os.path.basename(env["LLVM_PROFILE_FILE"]))
    if mode == "host":
        for key in COLLECTOR:
            env.pop(key, None)
    else:
        env["CCL_COV_SASS_DIR"] = folder
        if mode == "one":
            env["CUDA_INJECTION64_PATH"] = one_metric
    started = time.monotonic()
    try:
        done = subprocess.run(trial["argv"], cwd=trial["cwd"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        sys.exit(f"{trial['trial']} ({mode}): still running after 300 s: {trial['argv']}")
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{trial['trial']} ({mode}): exit status {done.returncode}: {trial['argv']}\n{done.stderr[-2000:]}")
    if mode in METRICS:
        want = f"metrics {METRICS[mode]} of 3"
        records = glob.glob(os.path.join(folder, "sass-*.tsv"))
        texts = [open(r, errors="replace").read() for r in records]
        # Only a process that made a CUDA context configures metrics; each that did says how many.
        said = {n for t in texts for n in re.findall(r"metrics (\d+) of 3", t)}
        if said != {str(METRICS[mode])}:
            sys.exit(f"{trial['trial']} ({mode}): the records in {folder} say metrics {sorted(said)} of 3, not `{want}`")
    shutil.rmtree(folder, ignore_errors=True)
    return took


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    workspace = os.path.abspath(sys.argv[1])
    rounds = int(option("--rounds", "3"))
    one_metric = option("--one-metric", None)
    needle = option("--filter", "")
    modes = ["host", "three"] + (["one"] if one_metric else [])
    trials = [t for t in json.load(open(os.path.join(workspace, "results", "run.json")))["trials"]
              if needle in t["trial"] and t["status"] == "PASSED"]
    scratch = tempfile.mkdtemp(prefix="ccl-cov-cost-")
    runs = []
    for round_ in range(rounds):
        for i, trial in enumerate(trials):
            # The modes alternate: each trial starts with another mode than the one before.
            shift = (round_ + i) % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                runs.append({"round": round_ + 1, "trial": trial["trial"], "mode": mode,
                             "s": round(replay(trial, mode, scratch, one_metric), 3)})
    shutil.rmtree(scratch, ignore_errors=True)

    def table(rows):
        total = {m: round(sum(r["s"] for r in rows if r["mode"] == m), 3) for m in modes}
        return {"seconds": total, "ratio": {m: round(total[m] / total["host"], 3) for m in modes if m != "host"}}

    sizes = sorted({r["trial"].split("::")[1] for r in runs})
    by_round = {f"{size} round {k}": table([r for r in runs if r["trial"].split("::")[1] == size and r["round"] == k])
                for size in sizes for k in range(1, rounds + 1)}
    print(json.dumps({"trials": len(trials), "rounds": rounds, "modes": modes,
                      "by_size": {size: table([r for r in runs if r["trial"].split("::")[1] == size]) for size in sizes},
                      "by_size_and_round": by_round, "all": table(runs), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
