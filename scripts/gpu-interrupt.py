#!/usr/bin/env python3
"""Ctrl-C during NCCL trials on GPUs: how long until no trial process and no
GPU context is left. Run by scripts/gpu-validation.sh (phase `interrupt`),
after the main phase built NCCL and nccl-tests:

    scripts/gpu-interrupt.py <collectives binary> <out folder> [signal]

It starts the MPI trials of configs/h200_nccl.json one at a time without
iteration trimming (so each trial runs long enough to be caught), waits until
the GPUs run a trial's ranks, sends the signal (default SIGINT) to the
harness, and records in <out>/interrupt.json the seconds until the last
process carrying the workspace in its environment is gone, the seconds until
nvidia-smi lists no compute process, and the trials' verdicts.
"""
import glob, json, os, signal, subprocess, sys, time

binary, out = sys.argv[1], sys.argv[2]
sig = getattr(signal, sys.argv[3]) if len(sys.argv) > 3 else signal.SIGINT
ws = os.path.abspath("target/ccl-coverage/h200_nccl-interrupt")
env = dict(os.environ, CCL_COV_WORKSPACE=ws, CCL_COV_TRIM_ITERATIONS="off")
log = open(os.path.join(out, "interrupt.log"), "w")
harness = subprocess.Popen([binary, "--test-threads", "1", "::mpi"], env=env, stdout=log, stderr=log)
needle = f"LLVM_PROFILE_FILE={ws}".encode()


def trial_processes():
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            if needle in open(environ, "rb").read():
                found.append(int(environ.split("/")[2]))
        except OSError:
            pass
    return found


def gpu_processes():
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return [line.strip() for line in q.stdout.splitlines() if line.strip()]


deadline = time.time() + 240
while not (trial_processes() and gpu_processes()):
    if harness.poll() is not None or time.time() > deadline:
        sys.exit("no trial reached the GPUs; see interrupt.log")
    time.sleep(0.05)
time.sleep(1.0)
seen = {"trial_processes": len(trial_processes()), "gpu_processes": gpu_processes()}
signalled = time.time()
harness.send_signal(sig)
gone = {}
while time.time() < signalled + 60 and len(gone) < 2:
    if "processes" not in gone and not trial_processes():
        gone["processes"] = round(time.time() - signalled, 3)
    if "gpu" not in gone and not gpu_processes():
        gone["gpu"] = round(time.time() - signalled, 3)
    time.sleep(0.02)
code = harness.wait(timeout=60)
run = json.load(open(os.path.join(ws, "results/run.json")))
report = {
    "signal": signal.Signals(sig).name,
    "before": seen,
    "seconds_until_no_trial_process": gone.get("processes"),
    "seconds_until_no_gpu_process": gone.get("gpu"),
    "left_after_60s": {"processes": trial_processes(), "gpu": gpu_processes()},
    "harness_exit": code,
    "trials": [(t["trial"], t["status"], t["reason"]) for t in run["trials"]],
}
json.dump(report, open(os.path.join(out, "interrupt.json"), "w"), indent=1)
print(json.dumps(report, indent=1))
