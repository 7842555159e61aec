#!/usr/bin/env python3
"""Nsight Compute's view of the device lines a suite executed: the independent
check of ccl-coverage's NVIDIA kernel lines (issue #30, docs/gpu-validation.md).

    ncu-source-lines.py run <workspace> <out> [--budget SECONDS] [--kernels REGEX]
        Runs every trial of <workspace>/results/run.json again, as the harness
        ran it (argv, environment, working directory) but without its CUPTI
        collector, under `ncu --section SourceCounters`, and prints each
        report's source page: <out>/<slug>.csv is
        `ncu --import <slug>.ncu-rep --page source --print-source cuda,sass --csv`,
        and <out>/<slug>.sass.csv the same page of SASS alone
        (`--print-source sass --print-kernel-base mangled`), each instruction
        with its thread counts.

    ncu-source-lines.py lines <out> > ncu-lines.tsv
        Reduces those pages to `<slug> <file> <line> <instructions executed>`
        (summed over the trial's kernel launches), one line each, sorted.

    ncu-source-lines.py branches <out> > ncu-branches.tsv
        Reduces the SASS pages to `<slug> <kernel> <offset hex> <instruction>
        <thread instructions executed> <predicated-on thread instructions
        executed>` for every guarded instruction (`@P0 ...`, `@!UP1 ...`),
        summed over the trial's launches of the kernel, one line each, sorted:
        the independent check of ccl-coverage's device branch outcomes.

    ncu-source-lines.py compare <ncu-lines.tsv> <device.lcov> [--prefix DIR]
        Per file, the lines Nsight Compute saw executed (union over the
        trials) against the covered lines of the harness's device.lcov
        (whose paths are relative to DIR). Exit 1 when they differ.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

COLLECTOR = ("CUDA_INJECTION64_PATH", "CCL_COV_SASS_DIR", "CCL_COV_SASS_CUBINS", "CCL_COV_SASS_KERNELS",
             "CCL_COV_SASS_MAX_LAUNCHES")


def run(workspace, out, budget, kernels):
    os.makedirs(out, exist_ok=True)
    trials = json.load(open(os.path.join(workspace, "results", "run.json")))["trials"]
    scratch = tempfile.mkdtemp(prefix="ccl-cov-ncu-")
    started = time.monotonic()
    for trial in trials:
        if time.monotonic() - started > budget:
            print(f"budget of {budget}s spent: {trial['trial']} and later not run", flush=True)
            break
        env = dict(os.environ)
        env.pop("__LLVM_PROFILE_RT_INIT_ONCE", None)
        for key, value in trial["env"]:
            env[key] = value
        for key in COLLECTOR:
            env.pop(key, None)
        if "LLVM_PROFILE_FILE" in env:
            env["LLVM_PROFILE_FILE"] = os.path.join(scratch, trial["slug"] + "-%p.profraw")
        report = os.path.join(out, trial["slug"])
        t0 = time.monotonic()
        only = ["--kernel-name-base", "mangled", "-k", "regex:" + kernels] if kernels else []
        done = subprocess.run(["ncu", "--section", "SourceCounters", "--target-processes", "all", *only, "-f", "-o",
                               report, *trial["argv"]], cwd=trial["cwd"], env=env, capture_output=True, text=True)
        with open(report + ".log", "w") as log:
            log.write(done.stdout + done.stderr)
        page = subprocess.run(["ncu", "--import", report + ".ncu-rep", "--page", "source", "--print-source",
                               "cuda,sass", "--csv"], capture_output=True, text=True)
        with open(report + ".csv", "w") as csv_file:
            csv_file.write(page.stdout)
        sass = subprocess.run(["ncu", "--import", report + ".ncu-rep", "--page", "source", "--print-source", "sass",
                               "--print-kernel-base", "mangled", "--csv"], capture_output=True, text=True)
        with open(report + ".sass.csv", "w") as csv_file:
            csv_file.write(sass.stdout)
        os.remove(report + ".ncu-rep")
        print(f"{trial['trial']}: ncu rc {done.returncode}, page rc {page.returncode}, "
              f"{time.monotonic() - t0:.1f}s, {len(page.stdout)} bytes", flush=True)


def source_rows(path):
    """`(file, line, instructions executed)` of every CUDA source row of one page: the page is,
    per profiled kernel launch and source file, a `"File Path"` row, a `"Function Name"` row, a
    header row (`"Line No"`, ...) and then one row per source line that has SASS (its
    `Line No` set), each followed by that line's SASS rows (`Line No` empty)."""
    file, header = None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "File Path":
                file, header = row[1], None
            elif row[0] == "Line No":
                header = row
            elif header and file and row[0].isdigit():
                executed = row[header.index("Instructions Executed")].replace(",", "")
                yield file, int(row[0]), int(executed) if executed.isdigit() else 0


def lines(out):
    """`{(slug, file, line): executed}` over every page of every trial: a line listed with 0
    has SASS that did not run."""
    counts = {}
    for name in sorted(os.listdir(out)):
        if not name.endswith(".csv"):
            continue
        slug = name[:-len(".csv")]
        for file, line, executed in source_rows(os.path.join(out, name)):
            key = (slug, os.path.normpath(file), line)
            counts[key] = counts.get(key, 0) + executed
    return counts


def number(text):
    text = text.replace(",", "").strip()
    return int(text) if text.isdigit() else 0


def sass_rows(path):
    """`(kernel, offset, instruction, threads, predicated on)` of every SASS row of one page: per
    profiled launch, a `Function Name` (or `Kernel Name`) row, a header row with `Address` and
    `Source`, then one row per instruction. Offsets are from the launch's first address."""
    kernel, header, base = None, None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] in ("Function Name", "Kernel Name") and len(row) > 1:
                kernel, header, base = row[1], None, None
            elif "Address" in row and "Source" in row:
                header = row
            elif header and kernel and len(row) == len(header):
                address = row[header.index("Address")].strip()
                try:
                    address = int(address, 16)
                except ValueError:
                    continue
                base = address if base is None else base
                threads = row[header.index("Thread Instructions Executed")]
                pred_on = row[header.index("Predicated-On Thread Instructions Executed")]
                yield kernel, address - base, row[header.index("Source")].strip(), number(threads), number(pred_on)


def branches(out):
    """`{(slug, kernel, offset, instruction): [threads, predicated on]}` of every guarded
    instruction over every SASS page, summed over launches."""
    counts = {}
    for name in sorted(os.listdir(out)):
        if not name.endswith(".sass.csv"):
            continue
        slug = name[:-len(".sass.csv")]
        for kernel, offset, instruction, threads, pred_on in sass_rows(os.path.join(out, name)):
            if not instruction.startswith("@"):
                continue
            total = counts.setdefault((slug, kernel, offset, instruction), [0, 0])
            total[0] += threads
            total[1] += pred_on
    return counts


def compare(tsv, lcov, prefix):
    ncu = {}
    for row in open(tsv):
        slug, file, line, executed = row.rstrip("\n").split("\t")
        if int(executed) > 0:
            ncu.setdefault(file, set()).add(int(line))
    ours, current = {}, None
    for row in open(lcov):
        row = row.strip()
        if row.startswith("SF:"):
            current = os.path.join(prefix, row[3:]) if prefix else row[3:]
            ours.setdefault(current, set())
        elif row.startswith("DA:"):
            line, count = row[3:].split(",")[:2]
            if int(count) > 0:
                ours[current].add(int(line))
    differ = 0
    for file in sorted(set(ncu) | set(ours)):
        theirs, mine = ncu.get(file, set()), ours.get(file, set())
        same = "same" if theirs == mine else "DIFFERENT"
        differ += theirs != mine
        print(f"{same:>9}  ncu {len(theirs):4d}  ccl-coverage {len(mine):4d}  {file}")
        if theirs != mine:
            print(f"           only ncu: {sorted(theirs - mine)}; only ccl-coverage: {sorted(mine - theirs)}")
    return 1 if differ else 0


def main():
    args = sys.argv[1:]
    if len(args) >= 3 and args[0] == "run":
        budget = float(args[args.index("--budget") + 1]) if "--budget" in args else 240.0
        kernels = args[args.index("--kernels") + 1] if "--kernels" in args else None
        run(args[1], args[2], budget, kernels)
    elif len(args) == 2 and args[0] == "lines":
        for (slug, file, line), executed in sorted(lines(args[1]).items()):
            print(f"{slug}\t{file}\t{line}\t{executed}")
    elif len(args) == 2 and args[0] == "branches":
        for (slug, kernel, offset, instruction), (threads, pred_on) in sorted(branches(args[1]).items()):
            print(f"{slug}\t{kernel}\t{offset:x}\t{instruction}\t{threads}\t{pred_on}")
    elif len(args) >= 3 and args[0] == "compare":
        prefix = args[args.index("--prefix") + 1] if "--prefix" in args else ""
        sys.exit(compare(args[1], args[2], prefix))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
