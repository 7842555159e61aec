#!/usr/bin/env python3
"""Interrupts a real `cargo test --test collectives` during a hung 3-rank mpirun
trial and measures how long its processes outlive the signal.

    scripts/interrupt-real-cargo.py term   # SIGTERM to cargo alone (cargo does not pass it on)
    scripts/interrupt-real-cargo.py int    # SIGINT to cargo's process group (Ctrl-C in a terminal)

The tests (tests/fault_matrix.rs) use a shell named `cargo` as the parent;
this checks the same with cargo itself. Run from the checkout after
`cargo test --test collectives --no-run`. Prints the time from the signal to
the last trial process gone, and the trials' verdicts from run.json.
"""
import glob, json, os, signal, subprocess, sys, tempfile, time

mode = sys.argv[1] if len(sys.argv) > 1 else "int"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tmp = tempfile.mkdtemp(prefix="ccl-cov-interrupt-")
config = json.load(open(os.path.join(root, "configs/local.json")))
config["library"]["source_dir"] = os.path.join(root, "tests/fixtures")
config["tests"]["source_dir"] = os.path.join(root, "tests/fixtures/ccl-tests")
config["report"]["snapshot"] = False
config["collectives"] = [c for c in config["collectives"] if c["name"] == "AllReduce"]
config["sizes"] = ["1K"]
config["variants"] = [
    {"name": "done", "ranks": 1},
    {"name": "mpihang", "launcher": "mpi", "ranks": 3,
     "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "1"}},
]
config["timeouts"] = {"default": 240, "grace": 2}
json.dump(config, open(os.path.join(tmp, "config.json"), "w"))
ws = os.path.join(tmp, "ws")
env = dict(os.environ, CCL_COV_CONFIG=os.path.join(tmp, "config.json"), CCL_COV_WORKSPACE=ws)
log = open(os.path.join(tmp, "cargo.log"), "w")
cargo = subprocess.Popen(["cargo", "test", "-q", "--test", "collectives", "--", "--test-threads", "1"],
                         cwd=root, env=env, stdout=log, stderr=log, start_new_session=True)
needle = f"LLVM_PROFILE_FILE={ws}".encode()


def trial_processes(extra=b""):
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            if needle + extra in open(environ, "rb").read():
                found.append(open(environ.replace("environ", "cmdline"), "rb").read().replace(b"\0", b" ")[:80])
        except OSError:
            pass
    return found


deadline = time.time() + 300
while sum(b"all_reduce_perf" in c for c in trial_processes(b"/profiles/AllReduce.1K.mpihang")) < 3:
    if time.time() > deadline:
        sys.exit("the mpi trial's ranks never started; see " + log.name)
    time.sleep(0.1)
signalled = time.time()
if mode == "term":
    os.kill(cargo.pid, signal.SIGTERM)
else:
    os.killpg(cargo.pid, signal.SIGINT)
while trial_processes() and time.time() < signalled + 30:
    time.sleep(0.02)
left = trial_processes()
print(f"{mode}: {len(left)} trial processes left, last one gone {time.time() - signalled:.2f}s after the signal")
time.sleep(3)
run = json.load(open(os.path.join(ws, "results/run.json")))
for t in run["trials"]:
    print(f"  {t['trial']}: {t['status']} {t['reason']}")
sys.exit(1 if left else 0)
