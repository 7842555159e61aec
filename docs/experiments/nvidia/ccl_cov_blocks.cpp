// The Compute Sanitizer prototype of issue #12 (docs/gpu-validation.md,
// "NVIDIA kernel line coverage"), host side: which instructions of which
// cubins a process executed. Not part of the harness yet: it is what a
// follow-up can build NVIDIA kernel coverage on, after CUPTI's SASS metrics
// proved unusable (they patch only the first kernel a context launches).
// scripts/gpu-nvidia-kernel-coverage.sh builds and runs it.
//
// The CUDA driver loads it into every process through CUDA_INJECTION64_PATH
// and calls InitializeInjection() at cuInit. It uses the Compute Sanitizer
// patching API (compute-sanitizer/include, libsanitizer-public.so): every
// module loaded is patched so that each thread-block entry, global, shared
// and local memory access, call, return, barrier, shuffle and warp sync calls
// a device function of nvidia/ccl_cov_patches.cu, which records the
// instruction's PC once in a set in device memory, one set per context.
// Function PCs are resolved while the modules are loaded. When a context is
// destroyed, and at exit, the set is read back and written as (cubin CRC-32,
// function, offset) lines, with every loaded cubin, into CCL_COV_BLOCKS_DIR:
// one record file per process.
//
// Environment:
//   CCL_COV_BLOCKS_DIR      folder for the record files and cubins (required)
//   CCL_COV_BLOCKS_PATCHES  the patch fatbin (required)
//   CCL_COV_BLOCKS_SLOTS    slots of each context's set (default 1048576)
//   CCL_COV_BLOCKS_KINDS    entry: patch thread-block entries only
//
// Record file (text, fields separated by tabs):
//   ccl-coverage-blocks<TAB>1
//   host<TAB><hostname>     pid<TAB><pid>
//   cubin<TAB><crc32 hex><TAB><bytes>
//   event<TAB><what happened: functions resolved, read back, errors, overflow>
//   b<TAB><crc32 hex><TAB><instruction offset in its function, hex><TAB><function>
//   end<TAB><why>           (only once every context was read back)

#include <cuda.h>
#include <sanitizer.h>

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

// Must match CclCovTable in nvidia/ccl_cov_patches.cu.
struct Table {
  unsigned long long* keys;
  unsigned int mask;
  unsigned int overflow;
};

struct Function {
  uint64_t pc, size;
  uint32_t crc;
  std::string name;
};

struct Module {
  CUmodule handle;
  uint32_t crc;
  std::vector<std::string> unresolved;  // function symbols without a PC yet
};

struct Context {
  bool patches_added = false;
  void* device = nullptr;  // Table, then the keys
  Table header{};          // kept alive for the asynchronous copy
  Sanitizer_StreamHandle stream = nullptr;
  std::vector<Module> modules;
  std::vector<Function> functions;  // resolved while the module is loaded
  std::set<CUfunction> with_data;
  bool read = false;
};

struct State {
  std::recursive_mutex mu;
  std::string dir, patches, host, path;
  size_t slots = 1u << 20;
  std::string kinds;  // "entry": thread-block entries only
  std::map<CUcontext, Context> contexts;
  std::set<uint32_t> cubins_written;
  std::map<uint32_t, size_t> cubins;
  std::vector<std::string> events;
  std::vector<std::string> blocks;  // "b" lines of contexts already read
  bool ended = false;
  Sanitizer_SubscriberHandle subscriber = nullptr;
};

State& state() {
  static State* s = new State();  // never destroyed: the exit handler uses it
  return *s;
}

void event(const std::string& what) { state().events.push_back(what); }

std::string result_text(SanitizerResult r) {
  const char* text = nullptr;
  sanitizerGetResultString(r, &text);
  return text ? text : ("sanitizer error " + std::to_string((int)r));
}

uint32_t crc32(const char* bytes, size_t size) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ (unsigned char)bytes[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

bool write_all(int fd, const char* p, size_t left) {
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= (size_t)n;
  }
  return true;
}

// Writes through a private temporary name and a rename, so that a reader
// never sees half a file, also when processes write the same cubin at once.
bool write_atomically(const std::string& path, const char* data, size_t size) {
  std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_all(fd, data, size);
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp.c_str(), path.c_str()) == 0) return true;
  unlink(tmp.c_str());
  return false;
}

// The names of the function symbols of an ELF cubin.
std::vector<std::string> function_names(const char* image, size_t size) {
  std::vector<std::string> names;
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(image, ELFMAG, SELFMAG) != 0) return names;
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)image;
  if (eh->e_shoff == 0 || eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size) return names;
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(image + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > size || strtab.sh_offset + strtab.sh_size > size) continue;
    const Elf64_Sym* syms = (const Elf64_Sym*)(image + sh[i].sh_offset);
    size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < count; ++k) {
      if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_size == 0) continue;
      if (syms[k].st_name >= strtab.sh_size) continue;
      const char* name = image + strtab.sh_offset + syms[k].st_name;
      if (std::memchr(name, 0, strtab.sh_size - syms[k].st_name)) names.emplace_back(name);
    }
  }
  return names;
}

// Looks up the device PC of every function not resolved yet. Done while the
// modules are loaded (at module load, and again at each launch for functions
// loaded lazily): at context destroy the lookups fail.
void resolve(Context& ctx) {
  for (Module& m : ctx.modules) {
    std::vector<std::string> left;
    for (const std::string& name : m.unresolved) {
      uint64_t pc = 0, size = 0;
      if (sanitizerGetFunctionPcAndSize(m.handle, name.c_str(), &pc, &size) == SANITIZER_SUCCESS && size > 0) {
        ctx.functions.push_back(Function{pc, size, m.crc, name});
      } else {
        left.push_back(name);
      }
    }
    m.unresolved.swap(left);
  }
}

void module_loaded(const Sanitizer_ResourceModuleData* data) {
  State& s = state();
  Context& ctx = s.contexts[data->context];
  SanitizerResult r;
  if (!ctx.patches_added) {
    if ((r = sanitizerAddPatchesFromFile(s.patches.c_str(), data->context)) != SANITIZER_SUCCESS) {
      event("error\tsanitizerAddPatchesFromFile(" + s.patches + "): " + result_text(r));
      return;
    }
    ctx.patches_added = true;
  }
  uint32_t crc = crc32(data->pCubin, data->cubinSize);
  struct Patch {
    Sanitizer_InstructionId id;
    const char* callback;
  };
  static const Patch entry[] = {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "CclCovBlockEnter"}};
  static const Patch all[] = {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "CclCovBlockEnter"},
                              {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "CclCovMemory"},
                              {SANITIZER_INSTRUCTION_SHARED_MEMORY_ACCESS, "CclCovMemory"},
                              {SANITIZER_INSTRUCTION_LOCAL_MEMORY_ACCESS, "CclCovMemory"},
                              {SANITIZER_INSTRUCTION_CALL, "CclCovCall"},
                              {SANITIZER_INSTRUCTION_RET, "CclCovRet"},
                              {SANITIZER_INSTRUCTION_BARRIER, "CclCovBarrier"},
                              {SANITIZER_INSTRUCTION_SHFL, "CclCovShfl"},
                              {SANITIZER_INSTRUCTION_SYNCWARP, "CclCovSyncwarp"}};
  bool entry_only = s.kinds == "entry";
  const Patch* patches = entry_only ? entry : all;
  size_t count = entry_only ? 1 : sizeof all / sizeof all[0];
  r = SANITIZER_SUCCESS;
  for (size_t i = 0; i < count && r == SANITIZER_SUCCESS; ++i) {
    r = sanitizerPatchInstructions(patches[i].id, data->module, patches[i].callback);
  }
  if (r != SANITIZER_SUCCESS || (r = sanitizerPatchModule(data->module)) != SANITIZER_SUCCESS) {
    char text[64];
    std::snprintf(text, sizeof text, "error\tpatching cubin %08x: ", crc);
    event(text + result_text(r));
    return;
  }
  ctx.modules.push_back(Module{data->module, crc, function_names(data->pCubin, data->cubinSize)});
  resolve(ctx);
  s.cubins[crc] = data->cubinSize;
  if (s.cubins_written.insert(crc).second) {
    char name[32];
    std::snprintf(name, sizeof name, "/%08x.cubin", crc);
    std::string path = s.dir + name;
    struct stat st;
    if (!(stat(path.c_str(), &st) == 0 && (size_t)st.st_size == data->cubinSize) &&
        !write_atomically(path, data->pCubin, data->cubinSize)) {
      event("error\tcannot write " + path + ": " + std::strerror(errno));
    }
  }
}

void at_exit();

void launch_begin(const Sanitizer_LaunchData* launch) {
  State& s = state();
  Context& ctx = s.contexts[launch->context];
  ctx.stream = launch->hStream;
  // Registered now, after the Sanitizer runtime registered its own teardown
  // while patching, so that ours runs first (exit handlers run in reverse).
  static bool exit_handler = false;
  if (!exit_handler) {
    exit_handler = true;
    std::atexit(at_exit);
  }
  SanitizerResult r;
  if (!ctx.device) {
    size_t bytes = 64 + s.slots * sizeof(unsigned long long);
    if ((r = sanitizerAlloc(launch->context, &ctx.device, bytes)) != SANITIZER_SUCCESS) {
      event("error\tsanitizerAlloc(" + std::to_string(bytes) + "): " + result_text(r));
      ctx.device = nullptr;
      return;
    }
    ctx.header.keys = (unsigned long long*)((char*)ctx.device + 64);
    ctx.header.mask = (unsigned int)(s.slots - 1);
    ctx.header.overflow = 0;
    if ((r = sanitizerMemset(ctx.device, 0, bytes, launch->hStream)) != SANITIZER_SUCCESS ||
        (r = sanitizerMemcpyHostToDeviceAsync(ctx.device, &ctx.header, sizeof ctx.header, launch->hStream)) !=
            SANITIZER_SUCCESS ||
        (r = sanitizerStreamSynchronize(launch->hStream)) != SANITIZER_SUCCESS) {
      event("error\tinitialising the block set: " + result_text(r));
      return;
    }
  }
  if (!ctx.with_data.insert(launch->function).second) return;
  resolve(ctx);
  if ((r = sanitizerSetCallbackData(launch->function, ctx.device)) != SANITIZER_SUCCESS) {
    event(std::string("error\tsanitizerSetCallbackData(") + (launch->functionName ? launch->functionName : "?") +
          "): " + result_text(r));
  }
}

// Reads a context's block set back and turns each PC into (cubin, function,
// offset).
void read_back(CUcontext handle, Context& ctx, const char* when) {
  State& s = state();
  if (ctx.read || !ctx.device) return;
  ctx.read = true;
  Sanitizer_StreamHandle stream = nullptr;
  if (sanitizerGetStreamHandle(handle, nullptr, &stream) != SANITIZER_SUCCESS || !stream) stream = ctx.stream;
  std::vector<unsigned long long> keys(s.slots);
  Table header{};
  SanitizerResult r;
  if ((r = sanitizerMemcpyDeviceToHost(&header, ctx.device, sizeof header, stream)) != SANITIZER_SUCCESS ||
      (r = sanitizerMemcpyDeviceToHost(keys.data(), (char*)ctx.device + 64, s.slots * sizeof(unsigned long long),
                                       stream)) != SANITIZER_SUCCESS) {
    event(std::string("error\treading the block set back at ") + when + ": " + result_text(r));
    return;
  }
  std::vector<Function> functions = ctx.functions;
  std::sort(functions.begin(), functions.end(), [](const Function& a, const Function& b) { return a.pc < b.pc; });
  size_t found = 0, unplaced = 0;
  char line[64];
  std::string sample;
  for (const Function& f : functions) {
    if (sample.size() > 300) break;
    std::snprintf(line, sizeof line, " %s@%llx+%llx", f.name.substr(0, 24).c_str(), (unsigned long long)f.pc, (unsigned long long)f.size);
    sample += line;
  }
  event("functions\t" + std::to_string(functions.size()) + sample);
  std::string raw;
  for (unsigned long long pc : keys) {
    if (pc == 0) continue;
    auto after = std::upper_bound(functions.begin(), functions.end(), pc,
                                  [](uint64_t v, const Function& f) { return v < f.pc; });
    if (after == functions.begin() || pc >= std::prev(after)->pc + std::prev(after)->size) {
      ++unplaced;
      if (raw.size() < 200) {
        std::snprintf(line, sizeof line, " %llx", pc);
        raw += line;
      }
      continue;
    }
    const Function& f = *std::prev(after);
    std::snprintf(line, sizeof line, "b\t%08x\t%llx\t", f.crc, (unsigned long long)(pc - f.pc));
    s.blocks.push_back(line + f.name);
    ++found;
  }
  event(std::string("read\t") + when + ": " + std::to_string(found) + " blocks entered, " +
        std::to_string(unplaced) + " outside known functions" + raw + ", overflow " + std::to_string(header.overflow));
}

void write_records(const char* end_reason) {
  State& s = state();
  std::string out = "ccl-coverage-blocks\t1\nhost\t" + s.host + "\npid\t" + std::to_string(getpid()) + "\n";
  char buf[64];
  for (const auto& [crc, size] : s.cubins) {
    std::snprintf(buf, sizeof buf, "cubin\t%08x\t%zu\n", crc, size);
    out += buf;
  }
  for (const std::string& e : s.events) out += "event\t" + e + "\n";
  for (const std::string& b : s.blocks) out += b + "\n";
  if (end_reason) out += std::string("end\t") + end_reason + "\n";
  if (!write_atomically(s.path, out.data(), out.size())) {
    std::fprintf(stderr, "ccl-coverage blocks[%d]: cannot write %s: %s\n", (int)getpid(), s.path.c_str(),
                 std::strerror(errno));
  }
}

void SANITIZERAPI on_callback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId id, const void* data) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended) return;
  if (domain == SANITIZER_CB_DOMAIN_RESOURCE) {
    if (id == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
      module_loaded((const Sanitizer_ResourceModuleData*)data);
    } else if (id == SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      CUcontext handle = ((const Sanitizer_ResourceContextData*)data)->context;
      auto found = s.contexts.find(handle);
      if (found != s.contexts.end()) {
        read_back(handle, found->second, "context destroy");
        write_records(nullptr);
        s.contexts.erase(found);
      }
    }
  } else if (domain == SANITIZER_CB_DOMAIN_LAUNCH && id == SANITIZER_CBID_LAUNCH_BEGIN) {
    launch_begin((const Sanitizer_LaunchData*)data);
  }
}

void at_exit() {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended) return;
  for (auto& [handle, ctx] : s.contexts) read_back(handle, ctx, "exit");
  s.ended = true;
  write_records("exit");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  static bool initialized = false;
  if (initialized) return 1;
  initialized = true;
  const char* dir = std::getenv("CCL_COV_BLOCKS_DIR");
  const char* patches = std::getenv("CCL_COV_BLOCKS_PATCHES");
  const char* slots = std::getenv("CCL_COV_BLOCKS_SLOTS");
  if (!dir || !*dir || !patches || !*patches) {
    std::fprintf(stderr, "ccl-coverage blocks[%d]: CCL_COV_BLOCKS_DIR or CCL_COV_BLOCKS_PATCHES is not set; recording nothing\n",
                 (int)getpid());
    return 1;
  }
  s.dir = dir;
  s.patches = patches;
  if (const char* kinds = std::getenv("CCL_COV_BLOCKS_KINDS")) s.kinds = kinds;
  if (slots) {
    size_t n = std::strtoull(slots, nullptr, 10);
    if (n >= 1024 && (n & (n - 1)) == 0) s.slots = n;
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  s.host = host;
  s.path = s.dir + "/blocks-" + s.host + "-" + std::to_string(getpid()) + ".tsv";
  SanitizerResult r = sanitizerSubscribe(&s.subscriber, (Sanitizer_CallbackFunc)on_callback, nullptr);
  if (r != SANITIZER_SUCCESS) {
    event("error\tsanitizerSubscribe: " + result_text(r));
  } else {
    sanitizerEnableDomain(1, s.subscriber, SANITIZER_CB_DOMAIN_RESOURCE);
    sanitizerEnableDomain(1, s.subscriber, SANITIZER_CB_DOMAIN_LAUNCH);
  }
  write_records(nullptr);
  return 1;
}
