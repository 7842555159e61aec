// The CUPTI SASS-metrics experiment of issue #12 (docs/gpu-validation.md,
// "NVIDIA kernel line coverage"): an injection library that records which SASS
// instructions of which cubins a process executed, in every way CUPTI allows
// enabling it. It is not part of the harness: it showed that on CUDA 13.0
// (CUPTI 2025.3.1, driver 580.159.04, H200) CUPTI patches only the first kernel
// a context launches, so it cannot give coverage.
// scripts/gpu-nvidia-kernel-coverage.sh builds and runs it.
//
// The CUDA driver loads it through CUDA_INJECTION64_PATH and calls
// InitializeInjection() at cuInit. It configures smsp__sass_inst_executed (GPU
// granularity) per device and enables SASS metrics per context, flushes at
// context destroy and at exit, and writes each loaded cubin (named by CUPTI's
// CRC) and one record file per process.
//
// Environment:
//   CCL_COV_SASS_DIR        folder for the record files (required)
//   CCL_COV_SASS_CUBINS     folder for the cubins (default: CCL_COV_SASS_DIR)
//   CCL_COV_SASS_VERBOSE=1  every event on stderr too
//   CCL_COV_SASS_TRACE=1    record every kernel launch as an event
//   CCL_COV_SASS_MODE       flush (also flush after a launch once the work is
//                           done), peek (only count records then), rearm
//                           (flush, disable and enable again)
//   CCL_COV_SASS_AT_LAUNCH=1  enable at a context's first launch, not at its
//                           creation
//   CCL_COV_SASS_REARM      1: when another function is launched, flush,
//                           disable and enable again; full: also unset and set
//                           the device's config; deinit: also deinitialise
//                           and initialise the profiler
//   CCL_COV_SASS_LAZY=0     eager patching (every function at enable)
//
// Record file (text, fields separated by tabs):
//   ccl-coverage-sass<TAB>1
//   host<TAB><hostname>     pid<TAB><pid>
//   cubin<TAB><crc hex><TAB><bytes>
//   event<TAB><what happened: enable, flush counts, dropped records, errors>
//   x<TAB><crc hex><TAB><pc offset hex><TAB><count><TAB><function>
//   end<TAB><reason>        (only after a clean exit)

#include <cuda.h>
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <cupti_profiler_target.h>
#include <cupti_sass_metrics.h>
#include <cupti_target.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

using Key = std::tuple<uint32_t, std::string, uint32_t>;  // crc, function, pc

struct State {
  std::recursive_mutex mu;
  std::string dir, cubin_dir, host, path;
  bool profiler_ready = false;
  std::set<uint32_t> configured_devices;
  std::map<CUcontext, bool> enabled;  // context -> launched since last flush
  std::map<uint32_t, size_t> cubins;  // crc -> size
  std::vector<std::string> pending_cubins;  // loaded, not yet named
  std::map<Key, uint64_t> executed;
  size_t patched_seen = 0;
  std::vector<std::string> events;
  bool ended = false;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool verbose = false;
  bool trace = false;
  bool enable_at_launch = false;
  bool rearm = false;
  bool full_rearm = false;
  bool deinit = false;
  int lazy = 1;
  size_t rearms = 0;
  std::map<CUcontext, CUfunction> range_function;
  std::string mode;
  std::map<CUcontext, int> ctx_ids;
};

State& state() {
  static State* s = new State();  // never destroyed: exit handlers use it
  return *s;
}

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return text ? text : "unknown CUPTI error";
}

std::string ctx_name(CUcontext ctx) {
  auto& ids = state().ctx_ids;
  if (!ids.count(ctx)) {
    int n = (int)ids.size();
    ids[ctx] = n;
  }
  uint32_t dev = 99;
  cuptiGetDeviceId(ctx, &dev);
  return std::to_string(ids[ctx]) + "/dev" + std::to_string(dev);
}

void event(const std::string& what) {
  State& s = state();
  s.events.push_back(what);
  if (s.verbose) std::fprintf(stderr, "ccl-coverage sass[%d]: %s\n", (int)getpid(), what.c_str());
}

bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0) return false;
    p += n;
    left -= (size_t)n;
  }
  return true;
}

// Writes `text` to `path` through a temporary file and a rename.
bool write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_all(fd, text) && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

void settle_cubins();

void write_records(const char* end_reason) {
  State& s = state();
  if (s.dir.empty()) return;
  settle_cubins();
  std::string out = "ccl-coverage-sass\t1\nhost\t" + s.host + "\npid\t" + std::to_string(getpid()) + "\n";
  char buf[64];
  for (const auto& [crc, size] : s.cubins) {
    std::snprintf(buf, sizeof buf, "cubin\t%08x\t%zu\n", crc, size);
    out += buf;
  }
  for (const auto& e : s.events) out += "event\t" + e + "\n";
  for (const auto& [key, count] : s.executed) {
    std::snprintf(buf, sizeof buf, "x\t%08x\t%x\t%llu\t", std::get<0>(key), std::get<2>(key),
                  (unsigned long long)count);
    out += buf;
    out += std::get<1>(key) + "\n";
  }
  if (end_reason) out += std::string("end\t") + end_reason + "\n";
  if (!write_atomically(s.path, out)) {
    std::fprintf(stderr, "ccl-coverage sass[%d]: cannot write %s: %s\n", (int)getpid(), s.path.c_str(),
                 std::strerror(errno));
  }
}

// Configures SASS metrics once per device and enables them on `ctx`.
void enable(CUcontext ctx) {
  State& s = state();
  if (s.enabled.count(ctx)) return;
  CUptiResult r;
  if (!s.profiler_ready) {
    CUpti_Profiler_Initialize_Params init = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    if ((r = cuptiProfilerInitialize(&init)) != CUPTI_SUCCESS) {
      event("error\tcuptiProfilerInitialize: " + result_text(r));
      return;
    }
    s.profiler_ready = true;
  }
  uint32_t device = 0;
  if ((r = cuptiGetDeviceId(ctx, &device)) != CUPTI_SUCCESS) {
    event("error\tcuptiGetDeviceId: " + result_text(r));
    return;
  }
  if (!s.configured_devices.count(device)) {
    CUpti_Device_GetChipName_Params chip = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    chip.deviceIndex = device;
    if ((r = cuptiDeviceGetChipName(&chip)) != CUPTI_SUCCESS) {
      event("error\tcuptiDeviceGetChipName: " + result_text(r));
      return;
    }
    CUpti_SassMetrics_GetProperties_Params props = {CUpti_SassMetrics_GetProperties_Params_STRUCT_SIZE};
    props.pChipName = chip.pChipName;
    props.pMetricName = "smsp__sass_inst_executed";
    if ((r = cuptiSassMetricsGetProperties(&props)) != CUPTI_SUCCESS) {
      event("error\tcuptiSassMetricsGetProperties(smsp__sass_inst_executed): " + result_text(r));
      return;
    }
    CUpti_SassMetrics_Config config = {props.metric.metricId, CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU};
    CUpti_SassMetricsSetConfig_Params set = {CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE};
    set.pConfigs = &config;
    set.numOfMetricConfig = 1;
    set.deviceIndex = device;
    if ((r = cuptiSassMetricsSetConfig(&set)) != CUPTI_SUCCESS) {
      event("error\tcuptiSassMetricsSetConfig(device " + std::to_string(device) + "): " + result_text(r));
      return;
    }
    s.configured_devices.insert(device);
    event("configured\tdevice " + std::to_string(device) + " chip " + chip.pChipName);
  }
  CUpti_SassMetricsEnable_Params on = {CUpti_SassMetricsEnable_Params_STRUCT_SIZE};
  on.ctx = ctx;
  on.enableLazyPatching = (uint8_t)s.lazy;
  if ((r = cuptiSassMetricsEnable(&on)) != CUPTI_SUCCESS) {
    event("error\tcuptiSassMetricsEnable(device " + std::to_string(device) + "): " + result_text(r));
    return;
  }
  s.enabled[ctx] = false;
  event("enabled\tdevice " + std::to_string(device));
}

// Moves CUPTI's counts for `ctx` into `executed`.
void flush(CUcontext ctx, const char* where_) {
  State& s = state();
  std::string where_s = std::string(where_) + " ctx " + ctx_name(ctx);
  const char* where = where_s.c_str();
  CUpti_SassMetricsGetDataProperties_Params props = {CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE};
  props.ctx = ctx;
  CUptiResult r = cuptiSassMetricsGetDataProperties(&props);
  if (r != CUPTI_SUCCESS) {
    event(std::string("error\tflush at ") + where + ": cuptiSassMetricsGetDataProperties: " + result_text(r));
    return;
  }
  size_t n = props.numOfPatchedInstructionRecords, instances = props.numOfInstances;
  if (n == 0 || instances == 0) {
    event(std::string("flush\t") + where + " 0 records");
    return;
  }
  std::vector<CUpti_SassMetrics_Data> data(n);
  std::vector<CUpti_SassMetrics_InstanceValue> values(n * instances);
  for (size_t i = 0; i < n; ++i) {
    data[i].structSize = sizeof(CUpti_SassMetrics_Data);
    data[i].pInstanceValues = &values[i * instances];
  }
  CUpti_SassMetricsFlushData_Params params = {CUpti_SassMetricsFlushData_Params_STRUCT_SIZE};
  params.ctx = ctx;
  params.numOfPatchedInstructionRecords = n;
  params.numOfInstances = instances;
  params.pMetricsData = data.data();
  if ((r = cuptiSassMetricsFlushData(&params)) != CUPTI_SUCCESS) {
    event(std::string("error\tflush at ") + where + ": cuptiSassMetricsFlushData: " + result_text(r));
    return;
  }
  size_t executed = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t count = 0;
    for (size_t k = 0; k < instances; ++k) count += data[i].pInstanceValues[k].value;
    if (count == 0) continue;
    ++executed;
    s.executed[Key(data[i].cubinCrc, data[i].functionName ? data[i].functionName : "?", data[i].pcOffset)] += count;
  }
  // CUPTI allocates the names; the caller frees them (NVIDIA's sass_metrics sample).
  for (size_t i = 0; i < n; ++i) std::free((void*)data[i].functionName);
  s.patched_seen += n;
  event(std::string("flush\t") + where + " " + std::to_string(n) + " records, " + std::to_string(executed) +
        " executed");
  write_records(nullptr);
}

void disable(CUcontext ctx, const char* where) {
  CUpti_SassMetricsDisable_Params off = {CUpti_SassMetricsDisable_Params_STRUCT_SIZE};
  off.ctx = ctx;
  CUptiResult r = cuptiSassMetricsDisable(&off);
  if (r != CUPTI_SUCCESS) {
    event(std::string("error\tdisable at ") + where + ": " + result_text(r));
  } else if (off.numOfDroppedRecords > 0) {
    event(std::string("dropped\t") + std::to_string(off.numOfDroppedRecords) + " records at " + where);
  }
  state().enabled.erase(ctx);
}

// zlib's CRC-32, to tell whether CUPTI's cubin CRC is that one.
uint32_t crc32(const std::string& bytes) {
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
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// Names the cubins loaded since the last call by CUPTI's CRC and writes each
// once. Not done in the module-load callback itself: cuptiGetCubinCrc there
// can deadlock against cuptiSassMetricsEnable patching the module.
void settle_cubins() {
  State& s = state();
  std::vector<std::string> pending;
  pending.swap(s.pending_cubins);
  for (const std::string& bytes : pending) {
    CUpti_GetCubinCrcParams crc = {CUpti_GetCubinCrcParamsSize};
    crc.cubin = bytes.data();
    crc.cubinSize = bytes.size();
    CUptiResult r = cuptiGetCubinCrc(&crc);
    if (r != CUPTI_SUCCESS) {
      event("error\tcuptiGetCubinCrc: " + result_text(r));
      continue;
    }
    uint32_t id = (uint32_t)crc.cubinCrc;
    char text[96];
    std::snprintf(text, sizeof text, "crc\tcupti %08x zlib %08x", id, crc32(bytes));
    event(text);
    if (s.cubins.count(id)) continue;
    s.cubins[id] = bytes.size();
    char name[32];
    std::snprintf(name, sizeof name, "%08x.cubin", id);
    std::string path = s.cubin_dir + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && (size_t)st.st_size == bytes.size()) continue;
    // Another process may write the same cubin at once: a private temporary
    // name, then a rename, so a reader never sees half of one.
    std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, bytes);
    if (fd >= 0) ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      event("error\tcannot write " + path + ": " + std::strerror(errno));
      unlink(tmp.c_str());
    }
  }
}

void module_loaded(const CUpti_ModuleResourceData* module) {
  if (!module || !module->pCubin || module->cubinSize == 0) return;
  state().pending_cubins.emplace_back(module->pCubin, module->cubinSize);
}

// The function a launch call starts, from its parameters.
CUfunction launched_function(CUpti_CallbackId id, const void* params) {
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      return ((const cuLaunchKernel_params*)params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return ((const cuLaunchKernelEx_params*)params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return ((const cuLaunchCooperativeKernel_params*)params)->f;
    default:
      return nullptr;
  }
}

bool is_launch(CUpti_CallbackId id) {
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return true;
    default:
      return false;
  }
}

// A call after which the work submitted so far is known to be done.
bool is_completion(CUpti_CallbackId id, const CUpti_CallbackData* call) {
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamQuery:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamQuery_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuEventQuery:
      return call->functionReturnValue && *(const CUresult*)call->functionReturnValue == CUDA_SUCCESS;
    default:
      return false;
  }
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended) return;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const CUpti_ResourceData* resource = (const CUpti_ResourceData*)data;
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
      if (!s.enable_at_launch) enable(resource->context);
    } else if (id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      if (s.enabled.count(resource->context)) {
        flush(resource->context, "context destroy");
        disable(resource->context, "context destroy");
        write_records(nullptr);
      }
    } else if (id == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
      module_loaded((const CUpti_ModuleResourceData*)resource->resourceDescriptor);
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const CUpti_CallbackData* call = (const CUpti_CallbackData*)data;
  if (call->callbackSite == CUPTI_API_ENTER) {
    if (!is_launch(id) || !call->context) return;
    CUfunction f = launched_function(id, call->functionParams);
    if (s.enable_at_launch && !s.enabled.count(call->context)) {
      enable(call->context);
      s.range_function[call->context] = f;
    } else if (s.rearm && s.enabled.count(call->context) && s.range_function[call->context] != f) {
      flush(call->context, "switch");
      disable(call->context, "switch");
      if (s.full_rearm) {
        uint32_t device = 0;
        cuptiGetDeviceId(call->context, &device);
        CUpti_SassMetricsUnsetConfig_Params unset = {CUpti_SassMetricsUnsetConfig_Params_STRUCT_SIZE};
        unset.deviceIndex = device;
        CUptiResult r = cuptiSassMetricsUnsetConfig(&unset);
        if (r != CUPTI_SUCCESS) event("error\tunset: " + result_text(r));
        s.configured_devices.erase(device);
        if (s.deinit) {
          CUpti_Profiler_DeInitialize_Params de = {CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
          r = cuptiProfilerDeInitialize(&de);
          if (r != CUPTI_SUCCESS) event("error\tdeinit: " + result_text(r));
          s.profiler_ready = false;
        }
      }
      enable(call->context);
      s.range_function[call->context] = f;
      s.rearms++;
    }
    return;
  }
  auto found = s.enabled.find(call->context);
  if (found == s.enabled.end()) return;
  if (is_launch(id)) {
    found->second = true;
    if (s.trace) event(std::string("launch\t") + (call->symbolName ? call->symbolName : "?") + " ctx " + ctx_name(call->context));
  } else if (found->second && is_completion(id, call)) {
    found->second = false;
    if (s.mode == "peek") {
      CUpti_SassMetricsGetDataProperties_Params props = {CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE};
      props.ctx = call->context;
      CUptiResult r = cuptiSassMetricsGetDataProperties(&props);
      event("peek\t" + std::string(call->functionName) + " ctx " + ctx_name(call->context) + " r=" + std::to_string((int)r) + " n=" + std::to_string(props.numOfPatchedInstructionRecords));
    } else {
      flush(call->context, "completion");
      if (s.mode == "rearm") {
        disable(call->context, "rearm");
        enable(call->context);
      }
    }
  }
}

void at_exit() {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended) return;
  std::vector<CUcontext> contexts;
  for (const auto& entry : s.enabled) contexts.push_back(entry.first);
  for (CUcontext ctx : contexts) {
    flush(ctx, "exit");
    disable(ctx, "exit");
  }
  s.ended = true;
  event("rearms\t" + std::to_string(s.rearms));
  write_records("exit");
  if (s.subscriber) cuptiUnsubscribe(s.subscriber);
}

bool subscribe(State& s) {
  CUptiResult r = cuptiSubscribe(&s.subscriber, (CUpti_CallbackFunc)on_callback, nullptr);
  if (r != CUPTI_SUCCESS) {
    event("error\tcuptiSubscribe: " + result_text(r));
    return false;
  }
  const CUpti_CallbackId resources[] = {CUPTI_CBID_RESOURCE_CONTEXT_CREATED,
                                        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
                                        CUPTI_CBID_RESOURCE_MODULE_LOADED};
  for (CUpti_CallbackId id : resources) cuptiEnableCallback(1, s.subscriber, CUPTI_CB_DOMAIN_RESOURCE, id);
  const CUpti_CallbackId driver[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,         CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuStreamQuery,            CUPTI_DRIVER_TRACE_CBID_cuStreamQuery_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuEventQuery};
  for (CUpti_CallbackId id : driver) cuptiEnableCallback(1, s.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  const char* dir = std::getenv("CCL_COV_SASS_DIR");
  const char* cubins = std::getenv("CCL_COV_SASS_CUBINS");
  const char* verbose = std::getenv("CCL_COV_SASS_VERBOSE");
  s.verbose = verbose && std::strcmp(verbose, "1") == 0;
  static bool initialized = false;
  if (initialized) return 1;
  initialized = true;
  s.trace = std::getenv("CCL_COV_SASS_TRACE") != nullptr;
  s.enable_at_launch = std::getenv("CCL_COV_SASS_AT_LAUNCH") != nullptr;
  s.rearm = std::getenv("CCL_COV_SASS_REARM") != nullptr;
  s.full_rearm = s.rearm && std::string(std::getenv("CCL_COV_SASS_REARM")) != "1";
  s.deinit = s.rearm && std::string(std::getenv("CCL_COV_SASS_REARM")) == "deinit";
  s.lazy = std::getenv("CCL_COV_SASS_LAZY") ? std::atoi(std::getenv("CCL_COV_SASS_LAZY")) : 1;
  s.mode = std::getenv("CCL_COV_SASS_MODE") ? std::getenv("CCL_COV_SASS_MODE") : "flush";
  if (!dir || !*dir) {
    std::fprintf(stderr, "ccl-coverage sass[%d]: CCL_COV_SASS_DIR is not set; recording nothing\n", (int)getpid());
    return 1;
  }
  s.dir = dir;
  s.cubin_dir = cubins && *cubins ? cubins : dir;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  s.host = host;
  s.path = s.dir + "/sass-" + s.host + "-" + std::to_string(getpid()) + ".tsv";
  if (subscribe(s)) std::atexit(at_exit);
  write_records(nullptr);
  return 1;
}
