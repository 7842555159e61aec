#!/usr/bin/env bash
# NVIDIA kernel lines as NVIDIA's own tools count them (issue #30,
# docs/gpu-validation.md "Every frame of the inline chain"), on a host with
# one GPU, through the harness itself.
#
# Usage, from the repository root: scripts/gpu-device-lines.sh <carry> <out> fixture|fixture-rest|branches|cupti|nccl
# <carry> holds ccl-coverage.xz (the release binary), unit-tests.xz (the
# crate's release unit-test binary), llvm19.tar.xz (clang, llvm-profdata,
# llvm-cov of LLVM 19 with their libraries and the profile runtime),
# libcupti.so.13.xz (the PyPI wheel nvidia-cuda-cupti 13.4.92's) and, for
# `nccl`, nccl.tar.xz and nccl-tests.tar.xz (git archives).
#
# fixture: the CUDA fixture (configs/h200_cuda.json, 24 trials) with device
#   coverage, then host-only; the capture for tests/fixtures/cuda-capture
#   (cubins, records, the report's device.lcov); every trial again under
#   Nsight Compute's source counters (scripts/ncu-source-lines.py run); the
#   crate's unit tests on this run's capture (markers, nvdisasm -gi).
# fixture-rest: the fixture's Broadcast and ReduceScatter trials again, under
#   Nsight Compute (the first run's budget ended before them).
# branches (issue #42): the CUDA fixture with device coverage (three-metric
#   records), then host-only; the capture (cubins, records, device.lcov,
#   build.json) and the toolkit's own `nvdisasm -c` of each cubin; every trial
#   under Nsight Compute (source pages with SASS and thread counts) for as
#   long as NCU_BUDGET seconds (default 380) allow; the crate's unit tests on
#   this capture.
# cupti: the probe (k1, k2, k3, k1) under collectors that count some kernels:
#   told to count k2 only, or each kernel's first launch, with and without
#   switching a context back on before it is torn down (the `[resume]` lines).
# nccl: NCCL's one-rank kernel (configs/h200_nccl.json, `one` variant,
#   1K/64M/1G) counting the library's kernels only, then every kernel, then
#   host-only; each kernel's first launch only, untrimmed iterations.
# nccl-branches (issue #42): NCCL's one-rank kernel with three metrics
#   (library's kernels), its report; each trial replayed from its record,
#   host-only, one metric and three metrics alternating, 3 rounds
#   (benches/replay_device_cost.py); then every trial under Nsight Compute,
#   NCCL's kernels only, for what is left of NCU_BUDGET (default 200) seconds.
# cost-fixture (issue #42): the CUDA fixture with three metrics, then the same
#   replayed rounds as nccl-branches.
# pages (issue #42): the CUDA fixture, then NCCL's one-rank kernel (library's
#   kernels, 1K/64M/1G), each with three metrics and its report; which of
#   llvm-cov's host pages show device branches and how many, who-covers on the
#   fixture's marked branch lines, and the pages of tally.cu and of NCCL's
#   files with device branches on a host page.
# Phases can be joined with commas: cupti,nccl.
set -uo pipefail
carry=$1 final=$2 phase=$3
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
[ -f "$carry/unit-tests.xz" ] && xz -dc "$carry/unit-tests.xz" > /tmp/bin/unit-tests && chmod +x /tmp/bin/unit-tests
cov=/tmp/bin/ccl-coverage
# The image sets CC/CXX to its gcc; the configs name clang.
unset CC CXX
export CCL_COV_LLVM_BIN=/tmp/llvm/bin LD_LIBRARY_PATH=/tmp/llvm/lib:${LD_LIBRARY_PATH:-} CUDA_HOME=/usr/local/cuda
export NCCL_NVLS_ENABLE=0 CCL_COV_CUPTI=/tmp/cupti/libcupti.so.13 PATH=/usr/local/cuda/bin:$PATH
{ date -u; nvidia-smi; nvcc --version | tail -2; ncu --version | tail -1; nvdisasm --version | tail -1; } > "$out/env.txt" 2>&1
stamp unpacked

# A copy of a config with `edit` (a Python statement on `c`) applied.
config_with() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}

has() { case ",$phase," in *",$1,"*) return 0;; esac; return 1; }

# The collector of a workspace's first trial, built again configuring the first metric only
# (its source beside it, the harness's compiler and flags): the cost of one metric.
one_metric_collector() { # workspace out.so
  local lib; lib=$(python3 -c 'import json,sys;t=json.load(open(sys.argv[1]+"/results/run.json"))["trials"][0];print(dict(t["env"])["CUDA_INJECTION64_PATH"])' "$1")
  sed 's/for (size_t slot = 0; slot < kMetricCount; ++slot) {/for (size_t slot = 0; slot < 1; ++slot) {/' \
    "$(dirname "$lib")/collector.cpp" > /tmp/one-metric.cpp
  grep -q 'slot < 1; ++slot' /tmp/one-metric.cpp || { echo "one metric: the configuring loop was not found"; return 1; }
  /tmp/llvm/bin/clang++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden /tmp/one-metric.cpp -I/usr/local/cuda/include \
    -L/tmp/cupti -l:libcupti.so.13 -Wl,-rpath,/tmp/cupti -ldl -o "$2"
}

if has fixture; then
  export CCL_COV_CONFIG=configs/h200_cuda.json
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov collectives > "$out/dev-collectives.log" 2>&1
  echo "rc=$?" >> "$out/dev-collectives.log"
  stamp dev-collectives
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov report > "$out/dev-report.log" 2>&1
  echo "rc=$?" >> "$out/dev-report.log"
  stamp dev-report
  for line in common.cuh:27 common.cuh:65 reduce.cu:13; do
    CCL_COV_WORKSPACE=/tmp/ws-dev $cov who-covers "$line" >> "$out/who-covers.txt" 2>&1
  done
  CCL_COV_DEVICE_COVERAGE=off CCL_COV_WORKSPACE=/tmp/ws-host $cov collectives > "$out/host-collectives.log" 2>&1
  echo "rc=$?" >> "$out/host-collectives.log"
  stamp host-collectives
  # What CI tests the mapping and the reports on.
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-dev/build.json"))["cache_dir"])')
  rm -rf /tmp/capture && mkdir -p /tmp/capture/trials
  cp -r "$build.device/cubins" /tmp/capture/
  for d in /tmp/ws-dev/profiles/*/; do
    s=$(basename "$d"); mkdir -p "/tmp/capture/trials/$s"; cp "$d"sass-*.tsv "/tmp/capture/trials/$s/" 2>/dev/null
  done
  cp /tmp/ws-dev/report/device.lcov /tmp/ws-dev/build.json /tmp/capture/
  mkdir -p /tmp/capture-extra
  cp /tmp/ws-dev/report/coverage.lcov /tmp/ws-dev/report/summary.md /tmp/ws-dev/report/summary-device.json \
    /tmp/ws-dev/report/meta.json /tmp/ws-dev/results/run.json /tmp/capture-extra/ 2>/dev/null
  cp /tmp/ws-host/results/run.json /tmp/capture-extra/run-host.json
  cp "$build/library-kernels.txt" /tmp/capture-extra/ 2>/dev/null
  stamp capture
  # Nsight Compute's source counters, every trial, the collector left out.
  python3 scripts/ncu-source-lines.py run /tmp/ws-dev /tmp/ncu --budget 200 > "$out/ncu-run.log" 2>&1
  echo "rc=$?" >> "$out/ncu-run.log"
  stamp ncu
  # The crate's own tests on this run's capture.
  rm -rf tests/fixtures/cuda-capture/cubins tests/fixtures/cuda-capture/trials
  cp -r /tmp/capture/cubins /tmp/capture/trials tests/fixtures/cuda-capture/
  CCL_COV_CUDA_CAPTURE=/tmp/capture /tmp/bin/unit-tests device::nvidia::sass > "$out/unit-tests.log" 2>&1
  echo "rc=$?" >> "$out/unit-tests.log"
  stamp unit-tests
  tar -czf "$final/capture.tar.gz" -C /tmp capture capture-extra
  tar -czf "$final/ncu.tar.gz" -C /tmp ncu
  cp -r /tmp/ws-dev/logs "$out/dev-logs"; cp -r /tmp/ws-host/logs "$out/host-logs"
fi

if has branches; then
  export CCL_COV_CONFIG=configs/h200_cuda.json
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov collectives > "$out/dev-collectives.log" 2>&1
  echo "rc=$?" >> "$out/dev-collectives.log"
  stamp dev-collectives
  CCL_COV_WORKSPACE=/tmp/ws-dev $cov report > "$out/dev-report.log" 2>&1
  echo "rc=$?" >> "$out/dev-report.log"
  stamp dev-report
  for line in tally.cu:17 tally.cu:23 tally.cu:33 common.cuh:35; do
    CCL_COV_WORKSPACE=/tmp/ws-dev $cov who-covers "$line" >> "$out/who-covers.txt" 2>&1
  done
  if [ "${HOST_ONLY:-1}" = 1 ]; then
    CCL_COV_DEVICE_COVERAGE=off CCL_COV_WORKSPACE=/tmp/ws-host $cov collectives > "$out/host-collectives.log" 2>&1
    echo "rc=$?" >> "$out/host-collectives.log"
    stamp host-collectives
  fi
  cp /tmp/ws-dev/report/summary-device.json /tmp/ws-dev/report/summary.md "$out/" 2>/dev/null
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-dev/build.json"))["cache_dir"])')
  rm -rf /tmp/capture /tmp/capture-extra && mkdir -p /tmp/capture/trials /tmp/capture-extra/nvdisasm
  cp -r "$build.device/cubins" /tmp/capture/
  for d in /tmp/ws-dev/profiles/*/; do
    s=$(basename "$d"); mkdir -p "/tmp/capture/trials/$s"; cp "$d"sass-*.tsv "/tmp/capture/trials/$s/" 2>/dev/null
  done
  cp /tmp/ws-dev/report/device.lcov /tmp/ws-dev/build.json /tmp/capture/
  cp /tmp/ws-dev/report/coverage.lcov /tmp/ws-dev/report/summary.md /tmp/ws-dev/report/summary-device.json \
    /tmp/ws-dev/report/meta.json /tmp/ws-dev/results/run.json /tmp/capture-extra/ 2>/dev/null
  cp /tmp/ws-host/results/run.json /tmp/capture-extra/run-host.json 2>/dev/null
  for c in /tmp/capture/cubins/*.cubin; do nvdisasm -c "$c" > "/tmp/capture-extra/nvdisasm/$(basename "$c" .cubin).sass"; done
  tar -czf "$final/capture.tar.gz" -C /tmp capture capture-extra
  stamp capture
  # NCU_SKIP: collectives whose trials an earlier run already profiled; the rest run again
  # (same build) in a workspace of their own, and only they go under Nsight Compute.
  ncu_ws=/tmp/ws-dev
  if [ -n "${NCU_SKIP:-}" ]; then
    skips=(); for c in $NCU_SKIP; do skips+=(--skip "$c"); done
    CCL_COV_WORKSPACE=/tmp/ws-rest $cov collectives "${skips[@]}" > "$out/rest-collectives.log" 2>&1
    echo "rc=$?" >> "$out/rest-collectives.log"
    ncu_ws=/tmp/ws-rest
  fi
  python3 scripts/ncu-source-lines.py run "$ncu_ws" /tmp/ncu --budget "${NCU_BUDGET:-380}" > "$out/ncu-run.log" 2>&1
  echo "rc=$?" >> "$out/ncu-run.log"
  stamp ncu
  python3 scripts/ncu-source-lines.py lines /tmp/ncu > "$final/ncu-lines.tsv" 2>> "$out/ncu-run.log"
  python3 scripts/ncu-source-lines.py branches /tmp/ncu > "$final/ncu-branches.tsv" 2>> "$out/ncu-run.log"
  # The pages themselves, in parts small enough to come back.
  tar -cf - -C /tmp ncu | xz -T0 -6 | split -b 15M - "$final/ncu.tar.xz."
  rm -rf tests/fixtures/cuda-capture/cubins tests/fixtures/cuda-capture/trials
  cp -r /tmp/capture/cubins /tmp/capture/trials /tmp/capture/device.lcov /tmp/capture/build.json tests/fixtures/cuda-capture/
  CCL_COV_CUDA_CAPTURE=/tmp/capture /tmp/bin/unit-tests sass > "$out/unit-tests.log" 2>&1
  echo "rc=$?" >> "$out/unit-tests.log"
  CCL_COV_CUDA_CAPTURE=/tmp/capture /tmp/bin/unit-tests device::nvidia >> "$out/unit-tests.log" 2>&1
  echo "rc=$?" >> "$out/unit-tests.log"
  stamp unit-tests
fi

if has fixture-rest; then
  export CCL_COV_CONFIG=configs/h200_cuda.json
  CCL_COV_WORKSPACE=/tmp/ws-rest $cov collectives --skip AllReduce --skip AllGather > "$out/rest-collectives.log" 2>&1
  echo "rc=$?" >> "$out/rest-collectives.log"
  stamp rest-collectives
  python3 scripts/ncu-source-lines.py run /tmp/ws-rest /tmp/ncu --budget 420 > "$out/ncu-run.log" 2>&1
  echo "rc=$?" >> "$out/ncu-run.log"
  stamp ncu
  tar -czf "$final/ncu.tar.gz" -C /tmp ncu
fi

if has cupti; then
  # The collector as the harness builds it, and without the [resume] lines.
  mkdir -p /tmp/cupti-x && cd /tmp/cupti-x || exit 1
  cp "$OLDPWD/src/device/nvidia/collector.cpp" resume.cpp
  sed '/\[resume\]/d' resume.cpp > noresume.cpp
  for v in resume noresume; do
    g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden $v.cpp -I/usr/local/cuda/include -L/tmp/cupti \
      -l:libcupti.so.13 -Wl,-rpath,/tmp/cupti -ldl -o lib$v.so >> "$out/cupti.txt" 2>&1
  done
  nvcc -arch=sm_90 -lineinfo -o probe "$OLDPWD/src/device/nvidia/probe.cu" >> "$out/cupti.txt" 2>&1
  printf '_Z2k2Piii\n' > k2.txt
  for v in resume noresume; do
    for mode in list first; do
      rm -rf "run-$v-$mode" && mkdir "run-$v-$mode"
      extra=(CCL_COV_SASS_KERNELS=/tmp/cupti-x/k2.txt)
      [ $mode = first ] && extra=(CCL_COV_SASS_MAX_LAUNCHES=1)
      env CUDA_INJECTION64_PATH=/tmp/cupti-x/lib$v.so CUDA_MODULE_LOADING=EAGER CCL_COV_SASS_DIR="/tmp/cupti-x/run-$v-$mode" \
        "${extra[@]}" ./probe > "run-$v-$mode/probe.log" 2>&1
      echo "== $v $mode: rc=$?" >> "$out/cupti.txt"
      grep -hE "^(x|skipped|capped|end|dropped|event)" "run-$v-$mode"/sass-*.tsv | cut -f1-4 | sort | uniq -c >> "$out/cupti.txt"
      tail -n 5 "run-$v-$mode/probe.log" >> "$out/cupti.txt"
    done
  done
  cd "$OLDPWD" || exit 1
  stamp cupti
fi

if has nccl; then
  mkdir -p /tmp/src
  tar -xJf "$carry/nccl.tar.xz" -C /tmp/src && tar -xJf "$carry/nccl-tests.tar.xz" -C /tmp/src
  export NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests
  # One rank, average: NCCL's oneRankReduce kernel (a sum is a memcpy on one rank).
  export NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=avg NCCL_ONLY_FUNCS="AllReduce Sum f32 RING SIMPLE"
  config_with configs/h200_nccl.json configs/.nccl-all.json 'c["name"] = "h200_nccl_all"; c["coverage"]["device"]["kernels"] = "all"'
  config_with configs/h200_nccl.json configs/.nccl-n20.json 'c["name"] = "h200_nccl_n20"; c["iterations"] = {"iters": 20, "warmup": 5, "trim_under_coverage": False}'
  config_with configs/h200_nccl.json configs/.nccl-n20-first.json 'c["name"] = "h200_nccl_n20_first"; c["iterations"] = {"iters": 20, "warmup": 5, "trim_under_coverage": False}; c["coverage"]["device"]["max_launches"] = 1'
  run() { # name config [env...]
    local name=$1 config=$2; shift 2
    env "$@" CCL_COV_CONFIG=$config CCL_COV_WORKSPACE=/tmp/ws-$name $cov collectives --ignored --test-threads 1 AllReduce \
      > "$out/$name-collectives.log" 2>&1
    echo "rc=$?" >> "$out/$name-collectives.log"
    CCL_COV_CONFIG=$config CCL_COV_WORKSPACE=/tmp/ws-$name $cov report > "$out/$name-report.log" 2>&1
    echo "rc=$?" >> "$out/$name-report.log"
    mkdir -p "$out/$name"
    cp /tmp/ws-$name/results/run.json /tmp/ws-$name/report/summary-device.json /tmp/ws-$name/report/device.lcov \
      /tmp/ws-$name/report/summary.md "$out/$name/" 2>/dev/null
    stamp "$name"
  }
  run library configs/h200_nccl.json
  # NCCL_ALL=0: the library's kernels only (the default mode), for the cost at three metrics.
  [ "${NCCL_ALL:-1}" = 1 ] && run all configs/.nccl-all.json
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-library/build.json"))["cache_dir"])')
  cp "$build/library-kernels.txt" "$out/" 2>/dev/null
  tar -czf "$final/nccl-cubins.tar.gz" -C "$build.device" cubins
  mkdir -p /tmp/nccl-records
  for d in /tmp/ws-library/profiles/*/ /tmp/ws-all/profiles/*/; do
    [ -d "$d" ] || continue
    w=$(basename "$(dirname "$(dirname "$d")")"); mkdir -p "/tmp/nccl-records/$w/$(basename "$d")"
    cp "$d"sass-*.tsv "/tmp/nccl-records/$w/$(basename "$d")/" 2>/dev/null
  done
  tar -czf "$final/nccl-records.tar.gz" -C /tmp nccl-records
  if [ "${NCCL_ALL:-1}" = 1 ] && [ $(($(date +%s) - started)) -lt 330 ]; then
    run n20 configs/.nccl-n20.json
    run n20-first configs/.nccl-n20-first.json
  fi
  # Host-only, the same trials, for the cost (a build of its own: no -lineinfo).
  CCL_COV_DEVICE_COVERAGE=off CCL_COV_CONFIG=configs/h200_nccl.json CCL_COV_WORKSPACE=/tmp/ws-nccl-host \
    $cov collectives --ignored --test-threads 1 AllReduce > "$out/nccl-host-collectives.log" 2>&1
  echo "rc=$?" >> "$out/nccl-host-collectives.log"
  mkdir -p "$out/nccl-host"; cp /tmp/ws-nccl-host/results/run.json "$out/nccl-host/" 2>/dev/null
  stamp host
  # nvdisasm -gi against our reading of NCCL's cubins, frame by frame (the unit test, on these cubins).
  [ "${NCCL_NVDISASM:-1}" = 1 ] && CCL_COV_CUDA_CUBINS="$build.device/cubins" /tmp/bin/unit-tests --exact \
    device::nvidia::sass::cubin::tests::every_frame_of_the_captured_cubins_matches_live_nvdisasm_gi > "$out/nccl-nvdisasm.log" 2>&1
  echo "rc=$?" >> "$out/nccl-nvdisasm.log"
  stamp nvdisasm
fi
if has nccl-branches; then
  mkdir -p /tmp/src
  tar -xJf "$carry/nccl.tar.xz" -C /tmp/src && tar -xJf "$carry/nccl-tests.tar.xz" -C /tmp/src
  export NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests
  export NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=avg NCCL_ONLY_FUNCS="AllReduce Sum f32 RING SIMPLE"
  ws=/tmp/ws-nccl3
  CCL_COV_CONFIG=configs/h200_nccl.json CCL_COV_WORKSPACE=$ws $cov collectives --ignored --test-threads 1 AllReduce \
    > "$out/nccl3-collectives.log" 2>&1
  echo "rc=$?" >> "$out/nccl3-collectives.log"
  stamp nccl3-collectives
  CCL_COV_CONFIG=configs/h200_nccl.json CCL_COV_WORKSPACE=$ws $cov report > "$out/nccl3-report.log" 2>&1
  echo "rc=$?" >> "$out/nccl3-report.log"
  stamp nccl3-report
  mkdir -p /tmp/nccl3/records
  cp $ws/results/run.json $ws/report/summary-device.json $ws/report/device.lcov $ws/report/summary.md /tmp/nccl3/ 2>/dev/null
  for d in $ws/profiles/*/; do
    s=$(basename "$d"); mkdir -p "/tmp/nccl3/records/$s"; cp "$d"sass-*.tsv "/tmp/nccl3/records/$s/" 2>/dev/null
  done
  build=$(python3 -c 'import json;print(json.load(open("/tmp/ws-nccl3/build.json"))["cache_dir"])')
  cp -r "$build.device/cubins" /tmp/nccl3/
  one_metric_collector $ws /tmp/libone-nccl.so > "$out/one-metric-nccl.log" 2>&1
  python3 benches/replay_device_cost.py $ws --rounds 3 --one-metric /tmp/libone-nccl.so > "$final/cost-nccl.json" 2> "$out/cost-nccl.log"
  echo "rc=$?" >> "$out/cost-nccl.log"
  stamp cost-nccl
  left=$(( ${NCU_BUDGET:-200} ))
  python3 scripts/ncu-source-lines.py run $ws /tmp/nccl3/ncu --budget "$left" --kernels 'oneRankReduce|ncclDev' \
    > "$out/ncu-nccl.log" 2>&1
  echo "rc=$?" >> "$out/ncu-nccl.log"
  python3 scripts/ncu-source-lines.py branches /tmp/nccl3/ncu > /tmp/nccl3/ncu-branches.tsv 2>> "$out/ncu-nccl.log"
  python3 scripts/ncu-source-lines.py lines /tmp/nccl3/ncu > /tmp/nccl3/ncu-lines.tsv 2>> "$out/ncu-nccl.log"
  tar -cf - -C /tmp --exclude nccl3/cubins nccl3 | xz -T0 -6 > "$final/nccl3.tar.xz"
  tar -cf - -C /tmp/nccl3 cubins | xz -T0 -6 > "$final/nccl3-cubins.tar.xz"
  stamp ncu-nccl
fi

# The host pages (llvm-cov's) of a workspace's report that show device branches, with how many.
pages_with_device_branches() { # workspace name
  ( cd "$1/report/html" && grep -rc "Device branch " coverage | grep -v ':0$' | sort ) > "$out/$2-host-pages.txt"
  mkdir -p "$final/pages-$2"
  while IFS=: read -r page _; do cp "$1/report/html/$page" "$final/pages-$2/" 2>/dev/null; done < "$out/$2-host-pages.txt"
  [ "$2" = fixture ] && cp -r "$1/report/html/device" "$final/pages-$2/device" 2>/dev/null
  return 0
}

# Runs a command into $out/<log>.log, its exit status last, and stamps the time.
logged() { # log command...
  local log=$1; shift
  "$@" > "$out/$log.log" 2>&1
  echo "rc=$?" >> "$out/$log.log"
  stamp "$log"
}

if has pages; then
  export CCL_COV_CONFIG=configs/h200_cuda.json CCL_COV_WORKSPACE=/tmp/ws-pages
  logged pages-collectives $cov collectives
  logged pages-report $cov report
  for line in common.cuh:35 tally.cu:17 tally.cu:19 tally.cu:23 tally.cu:31 tally.cu:33; do
    $cov who-covers "$line" >> "$final/who-covers-fixture.txt" 2>&1
  done
  pages_with_device_branches $CCL_COV_WORKSPACE fixture
  cp $CCL_COV_WORKSPACE/report/summary.md "$final/summary-fixture.md"
  mkdir -p /tmp/src
  tar -xJf "$carry/nccl.tar.xz" -C /tmp/src && tar -xJf "$carry/nccl-tests.tar.xz" -C /tmp/src
  export NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests
  export NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=avg NCCL_ONLY_FUNCS="AllReduce Sum f32 RING SIMPLE"
  export CCL_COV_CONFIG=configs/h200_nccl.json CCL_COV_WORKSPACE=/tmp/ws-nccl-pages
  logged nccl-pages-collectives $cov collectives --ignored --test-threads 1 AllReduce
  logged nccl-pages-report $cov report
  pages_with_device_branches $CCL_COV_WORKSPACE nccl
  cp $CCL_COV_WORKSPACE/report/summary.md "$final/summary-nccl.md"
  cp "$out"/*-host-pages.txt "$out"/*report.log "$final/" 2>/dev/null
  tar -czf "$final/pages.tar.gz" -C "$final" pages-fixture pages-nccl who-covers-fixture.txt && rm -rf "$final"/pages-* "$final/who-covers-fixture.txt"
fi

if has cost-fixture; then
  ws=/tmp/ws-fix3
  CCL_COV_CONFIG=configs/h200_cuda.json CCL_COV_WORKSPACE=$ws $cov collectives > "$out/fix3-collectives.log" 2>&1
  echo "rc=$?" >> "$out/fix3-collectives.log"
  stamp fix3-collectives
  one_metric_collector $ws /tmp/libone-fix.so > "$out/one-metric-fix.log" 2>&1
  python3 benches/replay_device_cost.py $ws --rounds "${FIX_ROUNDS:-3}" --one-metric /tmp/libone-fix.so \
    > "$final/cost-fixture.json" 2> "$out/cost-fixture.log"
  echo "rc=$?" >> "$out/cost-fixture.log"
  cp $ws/results/run.json "$out/fix3-run.json"
  stamp cost-fixture
fi
stamp done
