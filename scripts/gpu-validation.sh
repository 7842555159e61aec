#!/usr/bin/env bash
# The NCCL validation of docs/gpu-validation.md, on a host with 2 GPUs: the
# harness itself (the `collectives` and `coverage_report` test binaries, built
# on another machine with `cargo test --release --no-run`), then the same
# trials replayed directly for the harness's overhead.
#
# Usage, from the repository root:
#   scripts/gpu-validation.sh <carry> <out> main|broken|packed|interrupt
# <carry> holds bin/collectives, bin/coverage_report, llvm19.tar.xz (clang,
# llvm-profdata, llvm-cov of LLVM 19 with their libraries and the profile
# runtime), nccl.tar.xz and nccl-tests.tar.xz (git archives). `broken` builds
# NCCL without its AllGather kernels, which must make AllGather fail.
# `packed` runs the ignored one-GPU trials twice: one at a time, then packed
# two at a time by the GPU-slot scheduler (CUDA_VISIBLE_DEVICES={slots}).
# `interrupt` (after `main`, same machine) sends Ctrl-C to the harness while
# an MPI trial runs on the GPUs and times how long its processes and GPU
# contexts outlive it (scripts/gpu-interrupt.py).
set -uo pipefail
carry=$1 out=$2 phase=$3
started=$(date +%s)
stamp() { echo "$1 $(( $(date +%s) - started ))s" >> "$out/timings.txt"; }
tar -xJf "$carry/llvm19.tar.xz" -C /tmp
mkdir -p /tmp/src
tar -xJf "$carry/nccl.tar.xz" -C /tmp/src
tar -xJf "$carry/nccl-tests.tar.xz" -C /tmp/src
stamp unpacked
# The image sets CC/CXX to its gcc; the config names clang.
unset CC CXX
export CCL_COV_LLVM_BIN=/tmp/llvm/bin LD_LIBRARY_PATH=/tmp/llvm/lib:${LD_LIBRARY_PATH:-}
export NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests CCL_COV_CONFIG=configs/h200_nccl.json
export NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=sum NCCL_NVLS_ENABLE=0
# Only the kernels the trials use (float sum reductions, AllGather, Broadcast,
# send/recv for AllToAll and SendRecv): a full NCCL build takes many minutes.
kernels="AllReduce Sum f32 * *|Reduce Sum f32 * *|ReduceScatter Sum f32 * *|AllGather * *|Broadcast * *|SendRecv"
{
  date -u; uname -r; nproc; nvidia-smi; nvidia-smi topo -m; nvcc --version | tail -2
  command -v make mpirun python3; mpirun --version | head -1
} > "$out/env.txt" 2>&1
if [ "$phase" = main ]; then
  export NCCL_ONLY_FUNCS="$kernels"
  "$carry/bin/collectives" 2>&1 | tee "$out/collectives.log" | grep -E "^(test |ccl-coverage)" 
  stamp collectives
  "$carry/bin/coverage_report" 2>&1 | tee "$out/report.log"
  stamp report
  ws=target/ccl-coverage/h200_nccl
  cp "$ws/results/run.json" "$ws/report/summary.txt" "$out/"
  if [ $(( $(date +%s) - started )) -lt 420 ]; then
    python3 benches/replay_direct.py "$ws" > "$out/replay.json"
    stamp replay
  fi
elif [ "$phase" = interrupt ]; then
  export NCCL_ONLY_FUNCS="$kernels"
  python3 scripts/gpu-interrupt.py "$carry/bin/collectives" "$out" SIGINT
  stamp interrupt
elif [ "$phase" = packed ]; then
  export NCCL_ONLY_FUNCS="$kernels"
  for threads in 1 2; do
    export CCL_COV_WORKSPACE=target/ccl-coverage/h200_nccl-threads$threads
    "$carry/bin/collectives" --ignored --test-threads $threads 2>&1 | tee "$out/threads$threads.log" | grep -E "^(test |ccl-coverage)"
    stamp "threads$threads"
    cp "$CCL_COV_WORKSPACE/results/run.json" "$out/run-threads$threads.json"
  done
  # Which physical GPU (PCI bus id) each packed trial ran on.
  for log in target/ccl-coverage/h200_nccl-threads2/logs/*.log; do
    echo "$(basename "$log") $(grep -o '\[0000:[0-9a-f:.]*\]' "$log" | head -1)"
  done > "$out/devices.txt"
else
  export NCCL_ONLY_FUNCS="${kernels/AllGather \* \*|/}"
  echo "ONLY_FUNCS=$NCCL_ONLY_FUNCS" >> "$out/env.txt"
  export CCL_COV_WORKSPACE=target/ccl-coverage/h200_nccl-broken
  "$carry/bin/collectives" AllGather 2>&1 | tee "$out/collectives.log" | grep -E "^(test |ccl-coverage)"
  stamp collectives
  cp "$CCL_COV_WORKSPACE/results/run.json" "$out/"
fi
for log in target/ccl-coverage/builds/*/logs/*.log; do echo "== $log"; tail -15 "$log"; done > "$out/build.txt" 2>&1
