#!/usr/bin/env bash
# On the GPU host, after `scripts/gpu-validation.sh .carry $OUT main`: runs the full suite and
# the minimal suite into workspaces of their own and prints both coverage totals.
# .carry/minimal-args.txt holds the minimal suite's libtest arguments, one per line (from
# report/minimal-suite.json: `jq -r '.argv[5:][]'`).
# Usage: scripts/gpu-verify-minimal.sh <out folder>
set -uo pipefail
out=$1
tar -xJf .carry/llvm19.tar.xz -C /tmp && mkdir -p /tmp/src && tar -xJf .carry/nccl.tar.xz -C /tmp/src && tar -xJf .carry/nccl-tests.tar.xz -C /tmp/src
unset CC CXX
export CCL_COV_LLVM_BIN=/tmp/llvm/bin LD_LIBRARY_PATH=/tmp/llvm/lib:${LD_LIBRARY_PATH:-} NCCL_SRC=/tmp/src/nccl NCCL_TESTS_SRC=/tmp/src/nccl-tests CCL_COV_CONFIG=configs/h200_nccl.json NCCL_TESTS_DTYPE=float NCCL_TESTS_OP=sum NCCL_NVLS_ENABLE=0
export NCCL_ONLY_FUNCS="AllReduce Sum f32 * *|Reduce Sum f32 * *|ReduceScatter Sum f32 * *|AllGather * *|Broadcast * *|SendRecv"
mapfile -t args < .carry/minimal-args.txt
for ws in full minimal; do
  export CCL_COV_WORKSPACE=target/ccl-coverage/h200-$ws
  if [ $ws = full ]; then .carry/bin/collectives > $out/$ws.log 2>&1; else .carry/bin/collectives "${args[@]}" > $out/$ws.log 2>&1; fi
  echo "$ws collectives rc=$?"; grep "test result" $out/$ws.log
  .carry/bin/coverage_report --exact report::summary_json >> $out/$ws.log 2>&1
  python3 -c "import json;t=json.load(open('$CCL_COV_WORKSPACE/report/summary.json'))['data'][0]['totals'];print('$ws', {k:(t[k]['covered'],t[k]['count']) for k in ('lines','functions','regions','branches')})"
done
