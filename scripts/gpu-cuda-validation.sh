#!/usr/bin/env bash
# NVIDIA kernel line coverage through the harness, on a host with one GPU
# (docs/gpu-validation.md, "NVIDIA kernel line coverage"): the gate on the
# toolkit's CUPTI and on CUPTI 13.4, the CUDA fixture (configs/h200_cuda.json)
# with device coverage and host-only, a trial killed while patched, and
# NCCL's one-rank kernel (configs/h200_nccl.json, the `one` variant).
#
# Usage, from the repository root: scripts/gpu-cuda-validation.sh <carry> <out> [fixture|nccl|all]
# <carry> holds ccl-coverage (the release binary), llvm19.tar.xz (clang,
# llvm-profdata, llvm-cov of LLVM 19 with their libraries and the profile
# runtime), libcupti.so.13.xz (from the PyPI wheel nvidia-cuda-cupti 13.4.92)
# and, for `nccl`, nccl.tar.xz and nccl-tests.tar.xz (git archives); with
# unit-tests.xz (the crate's release unit-test binary) the fixture's markers
# are also asserted on this GPU's records.
set -uo pipefail
carry=$1 final=$2 phase=${3:-all}
# Everything is written under $out and packed into $final at the end: the
# device tool returns at most 8 files.
out=/tmp/gpu-out; rm -rf "$out"; mkdir -p "$out"
started=$(date +%s)
stamp() { echo "$1 $(($(date +%s) - started))s" | tee -a "$out/timings.txt"; }
pack() {
  tar -czf "$final/logs.tar.gz" -C /tmp gpu-out
  cp "$out/timings.txt" "$final/" 2>/dev/null
}
trap pack EXIT
tar -xJf "$carry/llvm19.tar.xz" -C /tmp
mkdir -p /tmp/cupti /tmp/bin
xz -dc "$carry/libcupti.so.13.xz" > /tmp/cupti/libcupti.so.13
xz -dc "$carry/ccl-coverage.xz" > /tmp/bin/ccl-coverage && chmod +x /tmp/bin/ccl-coverage
cov=/tmp/bin/ccl-coverage
# The image sets CC/CXX to its gcc; the configs name clang.
unset CC CXX
export CCL_COV_LLVM_BIN=/tmp/llvm/bin LD_LIBRARY_PATH=/tmp/llvm/lib:${LD_LIBRARY_PATH:-} CUDA_HOME=/usr/local/cuda
export NCCL_NVLS_ENABLE=0
{
  date -u; nvidia-smi; nvcc --version | tail -2
  find /usr/local/cuda/ /usr/lib/x86_64-linux-gnu -name 'libcupti*' -o -name cupti_sass_metrics.h 2>/dev/null
} > "$out/env.txt" 2>&1
# The toolkit's own CUPTI (CUDA 13.0's), for the gate.
host_cupti=$(find -L /usr/local/cuda/ -name 'libcupti.so*' -type f 2>/dev/null | head -1)
echo "host CUPTI: $host_cupti" >> "$out/env.txt"
stamp unpacked

if [ "$phase" = fixture ] || [ "$phase" = all ]; then
  export CCL_COV_CONFIG=configs/h200_cuda.json
  # The gate on the toolkit's own CUPTI (13.0): AUTO falls back and says why, ON fails.
  CCL_COV_CUPTI=$host_cupti CCL_COV_WORKSPACE=/tmp/ws-gate \
    $cov collectives --exact AllReduce::1K::direct > "$out/gate-auto.log" 2>&1
  echo "rc=$?" >> "$out/gate-auto.log"
  CCL_COV_CUPTI=$host_cupti CCL_COV_DEVICE_COVERAGE=on CCL_COV_WORKSPACE=/tmp/ws-gate-on \
    $cov collectives --exact AllReduce::1K::direct > "$out/gate-on.log" 2>&1
  echo "rc=$?" >> "$out/gate-on.log"
  stamp gate
  # Device coverage with CUPTI 13.4, then the same trials host-only.
  export CCL_COV_CUPTI=/tmp/cupti/libcupti.so.13
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov collectives > "$out/dev-collectives.log" 2>&1
  echo "rc=$?" >> "$out/dev-collectives.log"
  stamp dev-collectives
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov report > "$out/dev-report.log" 2>&1
  echo "rc=$?" >> "$out/dev-report.log"
  stamp dev-report
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov who-covers reduce.cu:17 > "$out/who-covers.txt" 2>&1
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov who-covers reduce.cu:62 >> "$out/who-covers.txt" 2>&1
  CCL_COV_DEVICE_COVERAGE=off CCL_COV_WORKSPACE=/tmp/ws-host $cov collectives > "$out/host-collectives.log" 2>&1
  echo "rc=$?" >> "$out/host-collectives.log"
  stamp host-collectives
  # A trial killed while patched: a long AllReduce, the harness SIGKILLed.
  python3 - <<'PY'
import json
c = json.load(open("configs/h200_cuda.json"))
c["name"] = "h200_cuda_kill"
c["collectives"] = [x for x in c["collectives"] if x["name"] == "AllReduce"]
c["sizes"] = ["1M"]; c["variants"] = []; c["iterations"] = {"iters": 200000, "warmup": 0, "trim_under_coverage": False}
json.dump(c, open("configs/.kill.json", "w"))
PY
  CCL_COV_CONFIG=configs/.kill.json CCL_COV_WORKSPACE=/tmp/ws-kill $cov collectives > "$out/kill.log" 2>&1 &
  harness=$!
  for _ in $(seq 1 600); do pgrep -f all_reduce_perf > /dev/null && break; sleep 0.1; done
  sleep 3
  {
    echo "before: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')"
    kill -9 $harness; t0=$(date +%s.%N)
    for _ in $(seq 1 300); do pgrep -f all_reduce_perf > /dev/null || break; sleep 0.1; done
    echo "trial gone after $(awk "BEGIN{print $(date +%s.%N)-$t0}") s"
    sleep 2
    echo "after: [$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')]"
    echo "token holders: [$(grep -l -a CCL_COV_TRIAL_TOKEN= /proc/[0-9]*/environ 2>/dev/null | tr '\n' ' ')]"
  } > "$out/kill.txt" 2>&1
  stamp kill
  # What CI tests the mapping and the reports on: the cubins and every trial's records.
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-dev/build.json"))["cache_dir"])')
  mkdir -p /tmp/capture/trials
  cp -r "$build/cubins" /tmp/capture/
  for d in /tmp/ws-dev/profiles/*/; do
    s=$(basename "$d"); mkdir -p "/tmp/capture/trials/$s"; cp "$d"sass-*.tsv "/tmp/capture/trials/$s/" 2>/dev/null
  done
  cp /tmp/ws-dev/report/coverage.lcov /tmp/ws-dev/report/summary.md /tmp/ws-dev/report/summary-device.json \
    /tmp/ws-dev/report/meta.json /tmp/ws-dev/report/attribution.json /tmp/ws-dev/build.json /tmp/capture/ 2>/dev/null
  cp /tmp/ws-dev/results/run.json /tmp/capture/run-dev.json; cp /tmp/ws-host/results/run.json /tmp/capture/run-host.json
  cp -r /tmp/ws-dev/report/html/device /tmp/capture/html-device 2>/dev/null
  tar -czf "$final/capture.tar.gz" -C /tmp capture
  # The markers asserted line by line on this GPU's own records (the crate's unit test).
  if [ -f "$carry/unit-tests.xz" ]; then
    xz -dc "$carry/unit-tests.xz" > /tmp/bin/unit-tests && chmod +x /tmp/bin/unit-tests
    CCL_COV_CUDA_CAPTURE=/tmp/capture /tmp/bin/unit-tests --exact \
      device::nvidia::sass::fixture_markers::every_marked_device_line_is_covered_in_exactly_its_trials > "$out/markers.log" 2>&1
    echo "rc=$?" >> "$out/markers.log"
  fi
  cp -r /tmp/ws-dev/logs "$out/dev-logs"; cp -r /tmp/ws-host/logs "$out/host-logs"
  stamp capture
fi

if [ "$phase" = nccl ] || { [ "$phase" = all ] && [ $(($(date +%s) - started)) -lt 330 ]; }; then
  mkdir -p /tmp/src
  tar -xJf "$carry/nccl.tar.xz" -C /tmp/src && tar -xJf "$carry/nccl-tests.tar.xz" -C /tmp/src
  export NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests CCL_COV_CONFIG=configs/h200_nccl.json
  # One rank, average: NCCL's oneRankReduce kernel (a sum is a memcpy on one rank).
  export NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=avg NCCL_ONLY_FUNCS="AllReduce Sum f32 RING SIMPLE"
  # CUPTI as `pip install nvidia-cuda-cupti` leaves it in a Python environment on PATH.
  site=/tmp/venv/lib/python3.12/site-packages
  mkdir -p /tmp/venv/bin "$site/nvidia/cu13/lib" "$site/nvidia_cuda_cupti-13.4.92.dist-info"
  cp /tmp/cupti/libcupti.so.13 "$site/nvidia/cu13/lib/"
  unset CCL_COV_CUPTI
  PATH=/tmp/venv/bin:$PATH CCL_COV_WORKSPACE=/tmp/ws-nccl $cov collectives --ignored --test-threads 1 AllReduce > "$out/nccl-collectives.log" 2>&1
  echo "rc=$?" >> "$out/nccl-collectives.log"
  stamp nccl-collectives
  PATH=/tmp/venv/bin:$PATH CCL_COV_WORKSPACE=/tmp/ws-nccl $cov report > "$out/nccl-report.log" 2>&1
  echo "rc=$?" >> "$out/nccl-report.log"
  stamp nccl-report
  mkdir -p "$out/nccl-out"
  cp /tmp/ws-nccl/report/summary.md /tmp/ws-nccl/report/summary-device.json /tmp/ws-nccl/report/summary.txt \
    /tmp/ws-nccl/results/run.json /tmp/ws-nccl/build.json "$out/nccl-out/" 2>/dev/null
  cp /tmp/ws-nccl/report/html/device/index.html "$out/nccl-out/device-index.html" 2>/dev/null
  python3 - > "$out/nccl-out/device-files.txt" <<'PY'
f = None; lf = lh = 0; rows = []
for line in open("/tmp/ws-nccl/report/coverage.lcov"):
    line = line.strip()
    if line.startswith("SF:"): f = line[3:]; lf = lh = 0
    elif line.startswith("DA:"):
        lf += 1; lh += int(line.split(",")[1]) > 0
    elif line == "end_of_record": rows.append((f, lh, lf))
for f, lh, lf in rows: print(f"{lh}/{lf}\t{f}")
PY
  cp -r /tmp/ws-nccl/logs "$out/nccl-out/" 2>/dev/null
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-nccl/build.json"))["cache_dir"])')
  cp -r "$build/cubins" "$out/nccl-out/" 2>/dev/null
  # Host-only, the same trials, for the cost (a build of its own: no -lineinfo).
  CCL_COV_DEVICE_COVERAGE=off CCL_COV_WORKSPACE=/tmp/ws-nccl-host $cov collectives --ignored --test-threads 1 AllReduce > "$out/nccl-host-collectives.log" 2>&1
  echo "rc=$?" >> "$out/nccl-host-collectives.log"
  cp /tmp/ws-nccl-host/results/run.json "$out/nccl-out/run-host.json" 2>/dev/null
  stamp nccl-host
fi
stamp done
