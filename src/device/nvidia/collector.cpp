// ccl-coverage's NVIDIA kernel collector: a CUDA injection library
// (CUDA_INJECTION64_PATH; the driver calls InitializeInjection() at cuInit)
// that records which SASS instructions of which cubins a process executed,
// and by how many threads, with CUPTI's SASS metrics at GPU granularity:
// smsp__sass_inst_executed (warp-level executions: lines),
// smsp__sass_thread_inst_executed (threads that executed the instruction) and
// smsp__sass_thread_inst_executed_pred_on (threads whose guard predicate was
// true: a conditional branch's taken outcome). The thread metrics give device
// branch coverage; where CUPTI will not configure them, the first alone is
// configured and the record says so.
//
// Derived from nvidia/cupti_sass_injection.cpp, reduced to the one mode that
// gives coverage with CUPTI >= 13.4 (docs: shared/spec/cupti-134/README.md):
// SASS metrics configured once per device and enabled on a context, with lazy
// patching (a function is patched at its first launch in an enabled range);
// counts flushed when a context is destroyed and at exit. CUPTI
// before 13.4 (CUDA 13.0's CUPTI 2025.3.1) patches only the first kernel a
// context launches, so the harness's capability probe (probe.cu) decides
// whether the CUPTI it found is usable. The process should run with
// CUDA_MODULE_LOADING=EAGER.
//
// Build (the harness, at fixture time, on the GPU host), as an argv:
//   ["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
//    "<this file>",
//    "-I<CUDA_HOME>/include", "-I<cupti include dir>",
//    "-L<dir of the chosen libcupti.so.13>", "-l:libcupti.so.13",
//    "-Wl,-rpath,<dir of the chosen libcupti.so.13>", "-ldl",
//    "-o", "<out>/libccl_cov_cupti.so"]
// It calls no CUDA driver function (CUcontext is only a handle here), so it
// needs no -lcuda; adding -lcuda does no harm where libcuda.so exists. -ldl is
// for dladdr() on glibc < 2.34 (a no-op after). Only these CUPTI headers are
// included, not <cupti.h>: cupti.h pulls in generated_cuda_runtime_api_meta.h,
// which does not compile against an older toolkit's runtime headers
// (cudaDevResource), so the CUPTI headers of a newer CUPTI can be used with
// the host toolkit's cuda.h.
//
// Environment:
//   CCL_COV_SASS_DIR     (required) the trial's profile folder: one record
//                        file per process, sass-<host>-<pid>.tsv
//   CCL_COV_SASS_CUBINS  folder where each distinct cubin is saved once, as
//                        <crc hex>.cubin (default: CCL_COV_SASS_DIR)
//   CCL_COV_SASS_KERNELS a file of kernel names (one mangled name a line):
//                        only these are counted. Counting costs every
//                        executed instruction, and a test program's own
//                        kernels (nccl-tests' data fill and check) execute
//                        the most, for lines the report leaves out anyway.
//                        Unset: every kernel is counted.
//   CCL_COV_SASS_MAX_LAUNCHES  count each kernel's first N launches in the
//                        process, not the later ones (unset: every launch).
//
// Counting is switched per context at each kernel launch (the launch API's
// entry callback): on before a kernel that is counted, off (flush, then
// disable) before one that is not. With neither variable set it is on from
// the context's creation, as it always was. A kernel launched through a CUDA
// graph cannot be named at its launch: graphs are always counted.
//
// Record file: text, fields separated by tabs, written atomically (a
// temporary file in the same folder, fsync, rename) when the library starts,
// after every context-destroy flush, and at exit; only the exit write ends
// with the `end` line:
//   ccl-coverage-sass  4
//   host    <hostname>
//   pid     <pid>
//   cupti   <cuptiGetVersion()>  <path of the loaded libcupti (dladdr)>
//   cubin   <crc hex>  <bytes>                      (one per distinct cubin)
//   event   <free text: enabled, flushes, errors>   (in order)
//   dropped <records CUPTI dropped, in total>        (always; 0 when none)
//   x       <crc hex>  <pc offset hex>  <count>  <threads>  <threads pred on>  <function (mangled)>
//           (version 4; the thread counts are `-` where only the first metric was configured)
//   skipped <launches not counted>  <function (mangled)>   (version 3: not listed)
//   capped  <launches not counted>  <function (mangled)>   (version 3: past the limit)
//   end     <reason>
// Counts of the same (cubin, function, offset) are summed over flushes; only
// executed instructions (count > 0) are written. Versions 1-3 had no thread
// counts (`x <crc> <offset> <count> <function>`). Free text has no tabs or
// newlines. A CUPTI error becomes an event line with the call and
// cuptiGetResultString(); nothing here ends or crashes the host process.

#include <cuda.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_pcsampling.h>
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_sass_metrics.h>
#include <cupti_target.h>
#include <cupti_version.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
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

// (cubin CRC, function, PC offset).
using Key = std::tuple<uint32_t, std::string, uint32_t>;

// The metrics asked for, in the order of Counts' fields.
constexpr const char* kMetrics[] = {"smsp__sass_inst_executed", "smsp__sass_thread_inst_executed",
                                    "smsp__sass_thread_inst_executed_pred_on"};
constexpr size_t kMetricCount = sizeof kMetrics / sizeof kMetrics[0];

// One instruction's counts, summed over flushes: warp-level executions, then
// threads and threads predicated on (valid only with `threads_counted`).
struct Counts {
  uint64_t value[kMetricCount] = {0, 0, 0};
  bool threads_counted = false;
};

struct State {
  std::recursive_mutex mu;
  pid_t pid = 0;            // the process that loaded us (a forked child writes nothing)
  std::string dir, cubin_dir, host, path;
  std::string cupti_line;   // "<version>\t<path>"
  bool profiler_ready = false;
  bool profiler_failed = false;
  std::set<uint32_t> configured_devices;
  std::set<CUcontext> enabled;
  std::set<CUcontext> paused;   // switched off before an uncounted kernel
  std::map<uint32_t, size_t> cubins;         // crc -> bytes
  std::vector<std::string> pending_cubins;   // loaded, not yet named by CRC
  std::map<Key, Counts> executed;
  // CUPTI's metric id -> index into kMetrics, for every metric configured.
  std::map<uint64_t, size_t> metric_slots;
  bool unknown_metric_seen = false;
  // Counting only some kernels: their names (CCL_COV_SASS_KERNELS), and how
  // many launches of each to count (CCL_COV_SASS_MAX_LAUNCHES; 0: all).
  bool selective = false;
  std::set<std::string> counted_kernels;
  uint64_t max_launches = 0;
  std::map<std::string, uint64_t> launches;   // counted launches by kernel
  std::map<std::string, uint64_t> skipped;    // launches of unlisted kernels, by kernel
  std::map<std::string, uint64_t> capped;     // launches past the limit, by kernel
  std::vector<std::string> events;
  uint64_t dropped = 0;
  bool ended = false;
  CUpti_SubscriberHandle subscriber = nullptr;
};

State& state() {
  static State* s = new State();  // never destroyed: the exit handler uses it
  return *s;
}

// Free text for one field: no tab, newline or carriage return.
std::string field(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

void event(const std::string& what) { state().events.push_back(field(what)); }

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || !text) return "CUPTI error " + std::to_string((int)r);
  return text;
}

// An event for a failed CUPTI call; returns whether the call succeeded.
bool ok(CUptiResult r, const std::string& call) {
  if (r == CUPTI_SUCCESS) return true;
  event("error " + call + ": " + result_text(r));
  return false;
}

std::string ctx_name(CUcontext ctx) {
  uint32_t id = 0, device = 0;
  std::string name = "ctx ";
  name += cuptiGetContextId(ctx, &id) == CUPTI_SUCCESS ? std::to_string(id) : "?";
  name += " device ";
  name += cuptiGetDeviceId(ctx, &device) == CUPTI_SUCCESS ? std::to_string(device) : "?";
  return name;
}

bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
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

// Writes `bytes` to `path` through a private temporary name in the same
// folder (fsync, rename), so a reader sees the old file or the whole new one.
// Mode 0666: the process's umask applies.
bool write_atomically(const std::string& path, const std::string& bytes, std::string* why) {
  std::string tmp = path + "." + std::to_string((long)getpid()) + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    *why = "open " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool good = write_all(fd, bytes);
  if (!good) *why = "write " + tmp + ": " + std::strerror(errno);
  if (good && fsync(fd) != 0) {
    *why = "fsync " + tmp + ": " + std::strerror(errno);
    good = false;
  }
  if (close(fd) != 0 && good) {
    *why = "close " + tmp + ": " + std::strerror(errno);
    good = false;
  }
  if (good && rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "rename " + tmp + ": " + std::strerror(errno);
    good = false;
  }
  if (!good) unlink(tmp.c_str());
  return good;
}

// Names the cubins loaded since the last call by CUPTI's CRC and saves each
// distinct one once. Not done in the module-load callback itself:
// cuptiGetCubinCrc there can deadlock against SASS-metrics patching.
void settle_cubins() {
  State& s = state();
  std::vector<std::string> pending;
  pending.swap(s.pending_cubins);
  for (const std::string& bytes : pending) {
    CUpti_GetCubinCrcParams crc = {CUpti_GetCubinCrcParamsSize};
    crc.cubin = bytes.data();
    crc.cubinSize = bytes.size();
    if (!ok(cuptiGetCubinCrc(&crc), "cuptiGetCubinCrc")) continue;
    uint32_t id = (uint32_t)crc.cubinCrc;
    if (s.cubins.count(id)) continue;
    s.cubins[id] = bytes.size();
    char name[32];
    std::snprintf(name, sizeof name, "%08x.cubin", id);
    std::string path = s.cubin_dir + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && (size_t)st.st_size == bytes.size()) continue;
    std::string why;
    if (!write_atomically(path, bytes, &why)) event("error saving cubin " + std::string(name) + ": " + why);
  }
}

void write_records(const char* end_reason) {
  State& s = state();
  if (s.path.empty() || getpid() != s.pid) return;
  settle_cubins();
  std::string out = "ccl-coverage-sass\t4\n";
  out += "host\t" + field(s.host) + "\n";
  out += "pid\t" + std::to_string((long)s.pid) + "\n";
  out += "cupti\t" + s.cupti_line + "\n";
  char buf[96];
  for (const auto& [crc, size] : s.cubins) {
    std::snprintf(buf, sizeof buf, "cubin\t%08x\t%zu\n", crc, size);
    out += buf;
  }
  for (const std::string& e : s.events) out += "event\t" + e + "\n";
  out += "dropped\t" + std::to_string((unsigned long long)s.dropped) + "\n";
  for (const auto& [key, counts] : s.executed) {
    if (counts.value[0] == 0) continue;
    std::snprintf(buf, sizeof buf, "x\t%08x\t%x\t%llu\t", std::get<0>(key), std::get<2>(key),
                  (unsigned long long)counts.value[0]);
    out += buf;
    if (counts.threads_counted) {
      std::snprintf(buf, sizeof buf, "%llu\t%llu\t", (unsigned long long)counts.value[1],
                    (unsigned long long)counts.value[2]);
      out += buf;
    } else {
      out += "-\t-\t";
    }
    out += field(std::get<1>(key)) + "\n";
  }
  for (const auto& [name, count] : s.skipped) {
    out += "skipped\t" + std::to_string((unsigned long long)count) + "\t" + field(name) + "\n";
  }
  for (const auto& [name, count] : s.capped) {
    out += "capped\t" + std::to_string((unsigned long long)count) + "\t" + field(name) + "\n";
  }
  if (end_reason) out += std::string("end\t") + field(end_reason) + "\n";
  std::string why;
  if (!write_atomically(s.path, out, &why)) {
    // The one thing that cannot be an event line: the record file itself.
    std::fprintf(stderr, "ccl-coverage collector[%ld]: cannot write its record file: %s\n", (long)s.pid,
                 why.c_str());
  }
}

// Configures SASS metrics once per device and enables them on `ctx`.
void enable(CUcontext ctx) {
  State& s = state();
  if (!ctx || s.enabled.count(ctx) || s.profiler_failed) return;
  if (!s.profiler_ready) {
    CUpti_Profiler_Initialize_Params init = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    if (!ok(cuptiProfilerInitialize(&init), "cuptiProfilerInitialize")) {
      s.profiler_failed = true;
      return;
    }
    s.profiler_ready = true;
  }
  uint32_t device = 0;
  if (!ok(cuptiGetDeviceId(ctx, &device), "cuptiGetDeviceId")) return;
  std::string dev = "device " + std::to_string(device);
  if (!s.configured_devices.count(device)) {
    CUpti_Device_GetChipName_Params chip = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    chip.deviceIndex = device;
    if (!ok(cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName(" + dev + ")")) return;
    // All three metrics if CUPTI has them, else the first alone (lines without branches).
    std::vector<CUpti_SassMetrics_Config> configs;
    std::vector<uint64_t> ids;
    for (size_t slot = 0; slot < kMetricCount; ++slot) {
      CUpti_SassMetrics_GetProperties_Params props = {CUpti_SassMetrics_GetProperties_Params_STRUCT_SIZE};
      props.pChipName = chip.pChipName;
      props.pMetricName = kMetrics[slot];
      if (!ok(cuptiSassMetricsGetProperties(&props), std::string("cuptiSassMetricsGetProperties(") + kMetrics[slot] + ")")) {
        if (slot == 0) return;
        break;
      }
      CUpti_SassMetrics_Config config = {};
      config.metricId = props.metric.metricId;
      config.outputGranularity = CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU;
      configs.push_back(config);
      ids.push_back(props.metric.metricId);
    }
    if (configs.size() < kMetricCount) configs.resize(1), ids.resize(1);
    CUpti_SassMetricsSetConfig_Params set = {CUpti_SassMetricsSetConfig_Params_STRUCT_SIZE};
    set.pConfigs = configs.data();
    set.numOfMetricConfig = configs.size();
    set.deviceIndex = device;
    if (!ok(cuptiSassMetricsSetConfig(&set), "cuptiSassMetricsSetConfig(" + dev + ")")) {
      if (configs.size() == 1) return;
      // Lines still count with the first metric alone.
      configs.resize(1), ids.resize(1);
      set.numOfMetricConfig = 1;
      if (!ok(cuptiSassMetricsSetConfig(&set), "cuptiSassMetricsSetConfig(" + dev + ", " + kMetrics[0] + ")")) return;
    }
    for (size_t slot = 0; slot < ids.size(); ++slot) s.metric_slots[ids[slot]] = slot;
    s.configured_devices.insert(device);
    event("configured " + dev + " chip " + (chip.pChipName ? chip.pChipName : "?") + " metrics " +
          std::to_string(configs.size()) + " of " + std::to_string(kMetricCount));
  }
  CUpti_SassMetricsEnable_Params on = {CUpti_SassMetricsEnable_Params_STRUCT_SIZE};
  on.ctx = ctx;
  on.enableLazyPatching = 1;
  if (!ok(cuptiSassMetricsEnable(&on), "cuptiSassMetricsEnable(" + ctx_name(ctx) + ")")) return;
  s.enabled.insert(ctx);
  event("enabled " + ctx_name(ctx) + " lazy patching");
}

// Moves CUPTI's counts for `ctx` into `executed`.
void flush(CUcontext ctx, const char* where) {
  State& s = state();
  std::string at = std::string(where) + " " + ctx_name(ctx);
  CUpti_SassMetricsGetDataProperties_Params props = {CUpti_SassMetricsGetDataProperties_Params_STRUCT_SIZE};
  props.ctx = ctx;
  if (!ok(cuptiSassMetricsGetDataProperties(&props), "cuptiSassMetricsGetDataProperties at " + at)) return;
  size_t n = props.numOfPatchedInstructionRecords, instances = props.numOfInstances;
  if (n == 0 || instances == 0) {
    event("flush at " + at + ": 0 records");
    return;
  }
  std::vector<CUpti_SassMetrics_Data> data(n);
  std::vector<CUpti_SassMetrics_InstanceValue> values(n * instances);
  for (size_t i = 0; i < n; ++i) {
    std::memset(&data[i], 0, sizeof data[i]);
    data[i].structSize = sizeof(CUpti_SassMetrics_Data);
    data[i].pInstanceValues = &values[i * instances];
  }
  CUpti_SassMetricsFlushData_Params params = {CUpti_SassMetricsFlushData_Params_STRUCT_SIZE};
  params.ctx = ctx;
  params.numOfPatchedInstructionRecords = n;
  params.numOfInstances = instances;
  params.pMetricsData = data.data();
  if (!ok(cuptiSassMetricsFlushData(&params), "cuptiSassMetricsFlushData at " + at)) return;
  // Each value names its metric: summed by metric, whether CUPTI gives one
  // record per instruction with every metric's instances or one per metric.
  size_t executed = 0;
  for (size_t i = 0; i < n; ++i) {
    Counts flushed;
    bool any = false;
    for (size_t k = 0; k < instances; ++k) {
      const CUpti_SassMetrics_InstanceValue& v = data[i].pInstanceValues[k];
      auto slot = s.metric_slots.find(v.metricId);
      if (slot == s.metric_slots.end()) {
        if (!s.unknown_metric_seen) event("error: a value of unconfigured metric id " + std::to_string(v.metricId));
        s.unknown_metric_seen = true;
        continue;
      }
      flushed.value[slot->second] += v.value;
      if (slot->second > 0) flushed.threads_counted = true;
      any = any || v.value > 0;
    }
    if (!any) continue;
    Counts& total = s.executed[Key(data[i].cubinCrc, data[i].functionName ? data[i].functionName : "?", data[i].pcOffset)];
    if (flushed.value[0] > 0) ++executed;
    for (size_t m = 0; m < kMetricCount; ++m) total.value[m] += flushed.value[m];
    total.threads_counted = total.threads_counted || flushed.threads_counted;
  }
  // CUPTI allocates the names with malloc; the caller frees them (NVIDIA's
  // sass_metrics sample).
  for (size_t i = 0; i < n; ++i) std::free((void*)data[i].functionName);
  event("flush at " + at + ": " + std::to_string(n) + " records, " + std::to_string(executed) + " executed");
}

void disable(CUcontext ctx, const char* where) {
  State& s = state();
  CUpti_SassMetricsDisable_Params off = {CUpti_SassMetricsDisable_Params_STRUCT_SIZE};
  off.ctx = ctx;
  std::string at = std::string(where) + " " + ctx_name(ctx);
  if (ok(cuptiSassMetricsDisable(&off), "cuptiSassMetricsDisable at " + at) && off.numOfDroppedRecords > 0) {
    s.dropped += off.numOfDroppedRecords;
    event("dropped " + std::to_string(off.numOfDroppedRecords) + " records at " + at);
  }
  s.enabled.erase(ctx);
}

// Waits for the work of the calling thread's current context, so that a
// flush sees the counts of kernels still running. cuCtxSynchronize comes from
// the driver that loaded us (no link against libcuda): libcuda.so.1 is already
// loaded, but not into the global scope, so it is looked up by its handle.
void synchronize() {
  using Sync = CUresult (*)();
  static Sync sync = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* found = driver ? dlsym(driver, "cuCtxSynchronize") : dlsym(RTLD_DEFAULT, "cuCtxSynchronize");
    return (Sync)found;
  }();
  if (!sync) {
    event("error: cuCtxSynchronize not found; a flush may miss kernels still running");
    return;
  }
  CUresult r = sync();
  if (r != CUDA_SUCCESS) event("error cuCtxSynchronize: " + std::to_string((int)r));
}

// Before a launch on `ctx` of `kernel` (nullptr: a graph, whose kernels have
// no name here): counting on for a kernel that is counted, else off.
void before_launch(CUcontext ctx, const char* kernel) {
  State& s = state();
  if (!ctx || s.profiler_failed) return;
  bool listed = true, capped = false;
  std::string name = kernel ? kernel : "";
  if (kernel && s.selective) {
    listed = s.counted_kernels.empty() || s.counted_kernels.count(name) > 0;
    capped = listed && s.max_launches > 0 && s.launches[name] >= s.max_launches;
  }
  if (listed && !capped) {
    if (kernel) ++s.launches[name];
    if (!s.enabled.count(ctx)) enable(ctx);
    if (s.enabled.count(ctx)) s.paused.erase(ctx);
    return;
  }
  ++(capped ? s.capped : s.skipped)[name];
  if (s.enabled.count(ctx)) {
    synchronize();
    flush(ctx, "launch of an uncounted kernel");
    disable(ctx, "launch of an uncounted kernel");
    s.paused.insert(ctx);
  }
}

// A context switched off by the selection is switched on again before it is
// destroyed and at exit, so that CUPTI tears down every context in the state
// it does without a selection: CUPTI 13.4 crashed in its own exit handler
// (a null dereference in libcuda) when a process ended with counting off on
// a context it had counted on (docs/gpu-validation.md). Nothing is patched
// again: patching is lazy, and no kernel launches after this.
void resume(CUcontext ctx) {
  State& s = state();
  if (!s.paused.count(ctx)) return;
  s.paused.erase(ctx);
  enable(ctx);
}

bool is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (id) {
      case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice:
        return true;
      default:
        return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (id) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
        return true;
      default:
        return false;
    }
  }
  return false;
}

bool is_graph_launch(CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  return (domain == CUPTI_CB_DOMAIN_DRIVER_API &&
          (id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz)) ||
         (domain == CUPTI_CB_DOMAIN_RUNTIME_API && (id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
                                                   id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000));
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended || !data) return;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    const CUpti_CallbackData* call = (const CUpti_CallbackData*)data;
    bool launch = is_launch(domain, id), graph = !launch && is_graph_launch(domain, id);
    if (!launch && !graph) return;
    // A runtime launch calls a driver launch: one launch, decided once, at the runtime's entry.
    static thread_local int in_runtime_launch = 0;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
      if (call->callbackSite == CUPTI_API_EXIT) {
        in_runtime_launch = 0;
        return;
      }
      // Without a current context yet, the driver launch inside decides.
      if (!call->context) return;
      in_runtime_launch = 1;
    } else if (call->callbackSite != CUPTI_API_ENTER || in_runtime_launch) {
      return;
    }
    try {
      before_launch(call->context, launch ? (call->symbolName ? call->symbolName : "?") : nullptr);
    } catch (...) {
      try {
        event("error in a launch callback: an exception; records may be incomplete");
      } catch (...) {
      }
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  try {
    const CUpti_ResourceData* resource = (const CUpti_ResourceData*)data;
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
      // Counting only some kernels: on at the first launch of one of them.
      if (!s.selective) enable(resource->context);
    } else if (id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      resume(resource->context);  // [resume]
      s.paused.erase(resource->context);
      if (s.enabled.count(resource->context)) {
        flush(resource->context, "context destroy");
        disable(resource->context, "context destroy");
        write_records(nullptr);
      }
    } else if (id == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
      const CUpti_ModuleResourceData* module = (const CUpti_ModuleResourceData*)resource->resourceDescriptor;
      if (module && module->pCubin && module->cubinSize > 0) {
        s.pending_cubins.emplace_back(module->pCubin, module->cubinSize);
      }
    }
  } catch (...) {
    // Out of memory, most likely: lose coverage, never the host process.
    try {
      event("error in a CUPTI callback: an exception; records may be incomplete");
    } catch (...) {
    }
  }
}

void at_exit() {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.ended || getpid() != s.pid) return;
  try {
    std::vector<CUcontext> paused(s.paused.begin(), s.paused.end());
    for (CUcontext ctx : paused) resume(ctx);  // [resume]
    std::vector<CUcontext> contexts(s.enabled.begin(), s.enabled.end());
    for (CUcontext ctx : contexts) {
      flush(ctx, "exit");
      disable(ctx, "exit");
    }
    s.ended = true;
    write_records("exit");
  } catch (...) {
    s.ended = true;
  }
  if (s.subscriber) cuptiUnsubscribe(s.subscriber);
  s.subscriber = nullptr;
}

bool subscribe(State& s) {
  if (!ok(cuptiSubscribe(&s.subscriber, (CUpti_CallbackFunc)on_callback, nullptr), "cuptiSubscribe")) {
    s.subscriber = nullptr;
    return false;
  }
  const CUpti_CallbackId resources[] = {CUPTI_CBID_RESOURCE_CONTEXT_CREATED,
                                        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
                                        CUPTI_CBID_RESOURCE_MODULE_LOADED};
  bool all = true;
  for (CUpti_CallbackId id : resources) {
    all = ok(cuptiEnableCallback(1, s.subscriber, CUPTI_CB_DOMAIN_RESOURCE, id),
             "cuptiEnableCallback(resource " + std::to_string((int)id) + ")") &&
          all;
  }
  if (!s.selective) return all;
  const CUpti_CallbackId driver[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz};
  const CUpti_CallbackId runtime[] = {
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000};
  for (CUpti_CallbackId id : driver) {
    all = ok(cuptiEnableCallback(1, s.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id),
             "cuptiEnableCallback(driver " + std::to_string((int)id) + ")") &&
          all;
  }
  for (CUpti_CallbackId id : runtime) {
    all = ok(cuptiEnableCallback(1, s.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id),
             "cuptiEnableCallback(runtime " + std::to_string((int)id) + ")") &&
          all;
  }
  return all;
}

std::string cupti_line() {
  uint32_t version = 0;
  std::string line = cuptiGetVersion(&version) == CUPTI_SUCCESS ? std::to_string(version) : "?";
  Dl_info info;
  std::memset(&info, 0, sizeof info);
  line += "\t";
  line += dladdr((void*)&cuptiGetVersion, &info) != 0 && info.dli_fname ? field(info.dli_fname) : "?";
  return line;
}

// CCL_COV_SASS_KERNELS and CCL_COV_SASS_MAX_LAUNCHES. A list that cannot be
// read counts every kernel, and says so: coverage is never narrowed by mistake.
void read_selection(State& s) {
  const char* list = std::getenv("CCL_COV_SASS_KERNELS");
  const char* max = std::getenv("CCL_COV_SASS_MAX_LAUNCHES");
  if (max && *max) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(max, &end, 10);
    if (end && *end == 0 && n > 0) {
      s.max_launches = n;
      s.selective = true;
      event("counting the first " + std::to_string(n) + " launches of each kernel");
    } else {
      event("error: CCL_COV_SASS_MAX_LAUNCHES=" + field(max) + " is not a positive number; counting every launch");
    }
  }
  if (!list || !*list) return;
  FILE* f = std::fopen(list, "r");
  if (!f) {
    event("error opening the kernel list " + field(list) + ": " + std::strerror(errno) + "; counting every kernel");
    return;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    std::string name(line);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    if (!name.empty()) s.counted_kernels.insert(name);
  }
  std::fclose(f);
  if (s.counted_kernels.empty()) {
    event("the kernel list " + field(list) + " is empty; counting every kernel");
    return;
  }
  s.selective = true;
  event("counting only the " + std::to_string(s.counted_kernels.size()) + " kernels of " + field(list));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  static bool initialized = false;
  if (initialized) return 1;
  initialized = true;
  try {
    const char* dir = std::getenv("CCL_COV_SASS_DIR");
    const char* cubins = std::getenv("CCL_COV_SASS_CUBINS");
    if (!dir || !*dir) {
      std::fprintf(stderr, "ccl-coverage collector[%ld]: CCL_COV_SASS_DIR is not set; recording nothing\n",
                   (long)getpid());
      return 1;
    }
    s.pid = getpid();
    s.dir = dir;
    s.cubin_dir = cubins && *cubins ? cubins : dir;
    if (mkdir(s.cubin_dir.c_str(), 0777) != 0 && errno != EEXIST) {
      event("error creating the cubin folder: " + std::string(std::strerror(errno)));
    }
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    s.host = host;
    s.path = s.dir + "/sass-" + s.host + "-" + std::to_string((long)s.pid) + ".tsv";
    s.cupti_line = cupti_line();
    event("collector started, built with CUPTI_API_VERSION " + std::to_string(CUPTI_API_VERSION));
    read_selection(s);
    subscribe(s);
    if (s.subscriber) std::atexit(at_exit);
    write_records(nullptr);
  } catch (...) {
  }
  return 1;
}
