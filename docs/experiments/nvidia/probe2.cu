#include <cstdio>
__global__ void k1(int* p) { p[threadIdx.x] += 1; }
__global__ void k2(int* p) { if (threadIdx.x < 3) p[threadIdx.x] *= 2; }
__global__ void k3(int* p) { p[threadIdx.x] -= 1; }
int main() {
  int* p; cudaMalloc(&p, 1024); cudaMemset(p, 0, 1024);
  k1<<<1, 32>>>(p); cudaDeviceSynchronize();
  k2<<<1, 32>>>(p); cudaDeviceSynchronize();
  k3<<<1, 32>>>(p); cudaDeviceSynchronize();
  k1<<<1, 32>>>(p); cudaDeviceSynchronize();
  int h[4]; cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost);
  printf("probe2 %d %d %d %d\n", h[0], h[1], h[2], h[3]);
}
