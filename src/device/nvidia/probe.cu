// The capability probe for NVIDIA kernel coverage. The harness builds it at
// fixture time (nvcc -arch=<target> -lineinfo probe.cu) and runs it under the
// collector (collector.cpp, CUDA_MODULE_LOADING=EAGER); it accepts the CUPTI
// only if the record file shows executed instructions in each of k1, k2 and
// k3. CUDA 13.0's CUPTI patches only a context's first kernel, so there it
// records k1 alone. The launch order k1, k2, k3, k1 is the one that failed.
//
// Each kernel does a little work with a branch that depends on the data;
// the results are checked on the host. Exit 0 when they are right, 1 when
// they are wrong, 2 when a CUDA call fails; one line on stdout says which.

#include <cstdio>
#include <cuda_runtime.h>

namespace {
constexpr int kN = 256;
}

// p[i] = i + 1, then odd values doubled.
__global__ void k1(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = p[i] + 1;
  if (v & 1) v *= 2;
  p[i] = v;
}

// Values above a threshold get the threshold subtracted.
__global__ void k2(int* p, int n, int threshold) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = p[i];
  if (v > threshold) v -= threshold;
  p[i] = v;
}

// Negates values divisible by 3.
__global__ void k3(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = p[i];
  if (v % 3 == 0) v = -v;
  p[i] = v;
}

namespace {

int host_k1(int v) {
  v += 1;
  if (v & 1) v *= 2;
  return v;
}
int host_k2(int v, int threshold) { return v > threshold ? v - threshold : v; }
int host_k3(int v) { return v % 3 == 0 ? -v : v; }

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("ccl-coverage probe: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  const int threshold = 100;
  int host[kN];
  for (int i = 0; i < kN; ++i) host[i] = i;
  int* p = nullptr;
  if (!check(cudaMalloc(&p, sizeof host), "cudaMalloc")) return 2;
  if (!check(cudaMemcpy(p, host, sizeof host, cudaMemcpyHostToDevice), "cudaMemcpy to device")) return 2;
  const int threads = 128, blocks = (kN + threads - 1) / threads;
  k1<<<blocks, threads>>>(p, kN);
  if (!check(cudaDeviceSynchronize(), "k1")) return 2;
  k2<<<blocks, threads>>>(p, kN, threshold);
  if (!check(cudaDeviceSynchronize(), "k2")) return 2;
  k3<<<blocks, threads>>>(p, kN);
  if (!check(cudaDeviceSynchronize(), "k3")) return 2;
  k1<<<blocks, threads>>>(p, kN);
  if (!check(cudaDeviceSynchronize(), "k1 again")) return 2;
  int out[kN];
  if (!check(cudaMemcpy(out, p, sizeof out, cudaMemcpyDeviceToHost), "cudaMemcpy to host")) return 2;
  if (!check(cudaFree(p), "cudaFree")) return 2;
  int wrong = 0;
  for (int i = 0; i < kN; ++i) {
    int want = host_k1(host_k3(host_k2(host_k1(host[i]), threshold)));
    if (out[i] != want) ++wrong;
  }
  if (wrong) {
    std::printf("ccl-coverage probe: %d of %d results wrong\n", wrong, kN);
    return 1;
  }
  std::printf("ccl-coverage probe: k1 k2 k3 k1 ran, %d results right\n", kN);
  return 0;
}
