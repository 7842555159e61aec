// A kernel of ccl-coverage's own for the SASS line-coverage tests
// (src/sass.rs): some lines run, some never do, and one kernel is never
// launched. scripts/gpu-sass-fixture.sh compiles it with -lineinfo on a GPU
// host, runs it under the injection library (cupti/ccl_cov_sass.cpp), and
// keeps the cubin, the record file and nvdisasm's line table beside it.
#include <cstdio>
#include <cstdlib>

__device__ int classify(int x) {
  if (x < 0) {
    return -1;
  }
  if (x > 1000000) {
    printf("never: %d\n", x);
    return 2;
  }
  return 1;
}

__global__ void probe(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = classify(in[i]);
  }
}

__global__ void never_launched(int* out) {
  printf("never launched\n");
  out[0] = 42;
}

int main(int argc, char** argv) {
  const int n = 64;
  int host_in[n], host_out[n];
  for (int i = 0; i < n; ++i) host_in[i] = i == 3 ? -5 : i;
  int *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, sizeof host_in) != cudaSuccess || cudaMalloc(&out, sizeof host_out) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(in, host_in, sizeof host_in, cudaMemcpyHostToDevice);
  probe<<<2, 32>>>(in, out, n);
  if (argc > 1 && argv[1][0] == 'q') {
    while (cudaStreamQuery(0) == cudaErrorNotReady) {
    }
  } else {
    cudaDeviceSynchronize();
  }
  cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host_out[i] != (i == 3 ? -1 : 1);
  if (argc > 1 && argv[1][0] == 'r') cudaDeviceReset();
  std::printf("probe: %d wrong\n", wrong);
  return wrong != 0;
}
