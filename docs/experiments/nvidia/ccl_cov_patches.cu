// Device side of the Compute Sanitizer prototype (host side and purpose:
// nvidia/ccl_cov_blocks.cpp). Each patched instruction calls one of these
// functions, which records the instruction's PC once in an open-addressing set
// in device memory that the host side reads back when the process ends.
//
// Built as a tools patch (scripts/gpu-nvidia-kernel-coverage.sh):
//   nvcc --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch -arch=sm_XX
#include <sanitizer_patching.h>

#include <cstdint>

// Must match `Table` in nvidia/ccl_cov_blocks.cpp.
struct CclCovTable {
  unsigned long long* keys;  // executed PCs, 0 = free slot
  unsigned int mask;         // slots - 1 (a power of two)
  unsigned int overflow;     // entries that found no slot
};

// How many slots one PC may probe before it counts as overflow.
constexpr unsigned int kProbes = 64;

// Records `pc` once.
__device__ __forceinline__ SanitizerPatchResult record(void* userdata, uint64_t pc) {
  CclCovTable* table = static_cast<CclCovTable*>(userdata);
  if (table == nullptr) return SANITIZER_PATCH_SUCCESS;
  unsigned int hash = static_cast<unsigned int>((pc >> 4) * 2654435761ull);
  for (unsigned int i = 0; i < kProbes; ++i) {
    unsigned int slot = (hash + i) & table->mask;
    // A plain read first: an instruction executed again (the common case)
    // costs no atomic operation.
    unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(&table->keys[slot]);
    if (seen == pc) return SANITIZER_PATCH_SUCCESS;
    if (seen == 0) {
      unsigned long long old = atomicCAS(&table->keys[slot], 0ull, static_cast<unsigned long long>(pc));
      if (old == 0 || old == pc) return SANITIZER_PATCH_SUCCESS;
    }
  }
  atomicAdd(&table->overflow, 1u);
  return SANITIZER_PATCH_SUCCESS;
}

// Thread-block (CTA) entry: the kernel's first instruction.
extern "C" __device__ __noinline__ SanitizerPatchResult CclCovBlockEnter(void* userdata, uint64_t pc) {
  return record(userdata, pc);
}

// Global, shared and local memory accesses: most basic blocks hold one.
extern "C" __device__ __noinline__ SanitizerPatchResult CclCovMemory(void* userdata, uint64_t pc, void*, uint32_t,
                                                                     uint32_t, const void*) {
  return record(userdata, pc);
}

extern "C" __device__ __noinline__ SanitizerPatchResult CclCovCall(void* userdata, uint64_t pc, uint64_t, uint32_t) {
  return record(userdata, pc);
}

extern "C" __device__ __noinline__ SanitizerPatchResult CclCovRet(void* userdata, uint64_t pc) {
  return record(userdata, pc);
}

extern "C" __device__ __noinline__ SanitizerPatchResult CclCovBarrier(void* userdata, uint64_t pc, uint32_t, uint32_t,
                                                                      uint32_t) {
  return record(userdata, pc);
}

extern "C" __device__ __noinline__ SanitizerPatchResult CclCovShfl(void* userdata, uint64_t pc) {
  return record(userdata, pc);
}

extern "C" __device__ __noinline__ SanitizerPatchResult CclCovSyncwarp(void* userdata, uint64_t pc, uint32_t) {
  return record(userdata, pc);
}
