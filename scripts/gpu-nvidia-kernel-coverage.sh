#!/usr/bin/env bash
# What NVIDIA's tool APIs give for kernel coverage on a GPU host (CUDA 13.0
# toolkit, 2 GPUs): the evidence behind docs/gpu-validation.md, "NVIDIA kernel
# line coverage". Part A: CUPTI's SASS metrics (docs/experiments/nvidia/cupti_sass_injection.cpp)
# on a three-kernel program (docs/experiments/nvidia/probe2.cu) in every enable mode, NVIDIA's
# own sass_metrics sample, and nccl-tests. Part B: the Compute Sanitizer
# patching API (docs/experiments/nvidia/ccl_cov_blocks.cpp + docs/experiments/nvidia/ccl_cov_patches.cu) on the
# same programs, with its cost against no instrumentation.
#
# Usage, from the repository root: scripts/gpu-nvidia-kernel-coverage.sh <carry> <out>
# <carry> holds nccl.tar.xz and nccl-tests.tar.xz (git archives of NVIDIA/nccl
# and NVIDIA/nccl-tests; never committed). Writes <out>/summary.txt.
set -uo pipefail
carry=$1 out=$2
cuda=${CUDA_HOME:-/usr/local/cuda} san=${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer w=/tmp/nvcov
mkdir -p $w/r
sum=$out/summary.txt
inc=$(dirname "$(find "$cuda/" -name cupti_sass_metrics.h | head -1)")
lib=$(dirname "$(find "$cuda/" -name 'libcupti.so' | head -1)")
{ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nvcc --version | tail -1; ls "$lib" | grep 'libcupti.so.20'; } >> $sum
build() { "$@" >> $out/build.txt 2>&1 || { echo "build failed: $*" >> $sum; tail -20 $out/build.txt >> $sum; exit 1; }; }
build nvcc -std=c++17 -shared -Xcompiler -fPIC,-fvisibility=hidden -O2 -I"$inc" docs/experiments/nvidia/cupti_sass_injection.cpp -o $w/libcupti_sass.so -L"$lib" -lcupti -Xlinker -rpath="$lib"
build nvcc -std=c++17 -shared -Xcompiler -fPIC,-fvisibility=hidden -O2 -I$san/include docs/experiments/nvidia/ccl_cov_blocks.cpp -o $w/libblocks.so -L$san -lsanitizer-public -Xlinker -rpath=$san
build nvcc -arch=sm_90 --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch -I$san/include docs/experiments/nvidia/ccl_cov_patches.cu -o $w/patches.fatbin
build nvcc -lineinfo -O3 -arch=sm_90 docs/experiments/nvidia/probe2.cu -o $w/probe2
build nvcc -lineinfo -O3 -arch=sm_90 docs/experiments/nvidia/probe.cu -o $w/probe
export CUDA_MODULE_LOADING=EAGER CCL_COV_BLOCKS_PATCHES=$w/patches.fatbin
# one <name> <tool: none|cupti|blocks> <VAR=value...> -- <command...>
one() {
  local name=$1 tool=$2; shift 2; local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
  local d=$w/r/$name; mkdir -p $d
  case $tool in
    cupti) vars+=(CUDA_INJECTION64_PATH=$w/libcupti_sass.so CCL_COV_SASS_DIR=$d CCL_COV_SASS_MODE=peek) ;;
    blocks) vars+=(CUDA_INJECTION64_PATH=$w/libblocks.so CCL_COV_BLOCKS_DIR=$d) ;;
  esac
  local s=$(date +%s.%N)
  env "${vars[@]}" timeout 150 "$@" > $d/out.txt 2>&1
  local rc=$?
  echo "$name ($tool ${vars[*]}) rc=$rc wall=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $s}")s $(grep -h 'Out of bounds\|probe\|Dropped\|Launching' $d/out.txt | tr '\n' ' ' | sed "s#$w/##g")" >> $sum
  for f in $d/*.tsv; do
    [ -f "$f" ] || continue
    grep -h '^event' $f | grep -v 'crc\|peek\|launch\|functions' | cut -f2- | tr '\t' ' ' | sort | uniq -c | head -6 | sed 's/^/      /' >> $sum
    awk -F'\t' '$1=="x"||$1=="b"{print $NF}' $f | sort | uniq -c | sort -rn | head -6 | sed 's/^/      PCs /' | cut -c1-140 >> $sum
  done
}
echo "== A. CUPTI SASS metrics, probe2 launches k1, k2, k3, k1" >> $sum
one cupti-create cupti X=1 -- $w/probe2
one cupti-at-launch cupti CCL_COV_SASS_AT_LAUNCH=1 -- $w/probe2
one cupti-rearm cupti CCL_COV_SASS_AT_LAUNCH=1 CCL_COV_SASS_REARM=1 -- $w/probe2
one cupti-rearm-config cupti CCL_COV_SASS_AT_LAUNCH=1 CCL_COV_SASS_REARM=full -- $w/probe2
one cupti-eager-patching cupti CCL_COV_SASS_LAZY=0 -- $w/probe2
echo "== A. NVIDIA's sample extras/CUPTI/samples/sass_metrics (expects VectorSubtract's records dropped)" >> $sum
( cd $cuda/extras/CUPTI/samples/sass_metrics && make > $out/sample-build.txt 2>&1 && timeout 60 ./sass_metrics > $w/sample.txt 2>&1 )
grep -E 'Launching|Kernel Name|Dropped' $w/sample.txt | sed 's/^/      /' >> $sum
echo "== B. Compute Sanitizer patching, probe2" >> $sum
one san-entry blocks CCL_COV_BLOCKS_KINDS=entry -- $w/probe2
one san-all blocks X=1 -- $w/probe2
one san-probe blocks X=1 -- $w/probe
one san-probe-mpi-reset blocks X=1 -- mpirun --allow-run-as-root -np 2 -x CUDA_INJECTION64_PATH -x CUDA_MODULE_LOADING -x CCL_COV_BLOCKS_DIR -x CCL_COV_BLOCKS_PATCHES $w/probe r
mkdir -p /tmp/src; tar -xJf $carry/nccl.tar.xz -C /tmp/src; tar -xJf $carry/nccl-tests.tar.xz -C /tmp/src
export NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
s=$(date +%s)
NVCC_APPEND_FLAGS=-lineinfo make -C /tmp/src/nccl -j 32 src.build BUILDDIR=/tmp/nb "ONLY_FUNCS=AllReduce Sum f32 * *" > $out/nccl-build.txt 2>&1 || tail -20 $out/nccl-build.txt >> $sum
make -C /tmp/src/nccl-tests -j 32 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=/tmp/nb CUDA_HOME=$cuda BUILDDIR=/tmp/ntb > $out/tests-build.txt 2>&1 || tail -20 $out/tests-build.txt >> $sum
echo "== NCCL (AllReduce Sum f32 kernels, -lineinfo) and nccl-tests built in $(( $(date +%s) - s )) s" >> $sum
export LD_LIBRARY_PATH=/tmp/nb/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
ar=/tmp/ntb/all_reduce_perf
at() { echo "-b $1 -e $1 -n 1 -w 0 -c 1 -d float -o sum"; }
mpi=(mpirun --allow-run-as-root -np 2 --bind-to none -x CUDA_INJECTION64_PATH -x CUDA_MODULE_LOADING -x CCL_COV_SASS_DIR -x CCL_COV_SASS_MODE -x CCL_COV_SASS_AT_LAUNCH -x CCL_COV_BLOCKS_DIR -x CCL_COV_BLOCKS_PATCHES -x CCL_COV_BLOCKS_KINDS -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
echo "== A. CUPTI on nccl-tests all_reduce_perf (one process on 2 GPUs; 2 MPI ranks)" >> $sum
one cupti-nccl-g2 cupti X=1 -- $ar -g 2 $(at 1K)
one cupti-nccl-mpi cupti X=1 -- "${mpi[@]}" $ar -g 1 $(at 1K)
one cupti-nccl-mpi-at-launch cupti CCL_COV_SASS_AT_LAUNCH=1 -- "${mpi[@]}" $ar -g 1 $(at 1K)
echo "== B. Compute Sanitizer on nccl-tests, and the cost" >> $sum
for size in 1K 64M 1G; do
  one none-g2-$size none X=1 -- $ar -g 2 $(at $size)
  one san-g2-$size blocks X=1 -- $ar -g 2 $(at $size)
  one none-mpi-$size none X=1 -- mpirun --allow-run-as-root -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE $ar -g 1 $(at $size)
  one san-mpi-$size blocks CCL_COV_BLOCKS_KINDS=all -- "${mpi[@]}" $ar -g 1 $(at $size)
done
tar -C $w -czf $out/records.tgz --exclude='*.cubin' r
