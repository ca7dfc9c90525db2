// torch.profiler sees the NPU: a Kineto activity profiler for the PrivateUse1 device.
//
// Kineto (PyTorch's profiling library) lets an accelerator plug in a "child"
// activity profiler. While a torch.profiler.profile() with
// ProfilerActivity.PrivateUse1 records, our session subscribes to the driver's
// activities (every kernel launch and copy) and, when the trace is processed,
// hands them to Kineto as device kernels and memcpys, linked to the ATen
// operator that launched them (Kineto's correlation ids).
//
// Where a device event sits on the trace's time line: the simulated device
// runs a kernel as it is launched, so its event starts when the host launched
// it (or when the previous kernel on the same stream ended, whichever is
// later) and lasts the kernel's *simulated* time, as a real device trails its
// host. Times are therefore never negative and each stream's events never
// overlap.
//
// The simulated *host* time line appears too, as runtime events on the
// thread that issued the work (as cudaLaunchKernel rows do in a CUDA trace):
// each launch and copy costs the host its simulated issue time, and each wait
// (synchronize, a blocking copy) lasts as long as the host waited for the
// device, on the simulated clock.
// Kineto formats metadata with {fmt}; torch does not export its compiled copy, so use it header-only.
#define FMT_HEADER_ONLY
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/utils/pybind.h>

#include <libkineto.h>
#include <output_base.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "../driver/npu_driver.h"

namespace npu::profiler {

namespace {

// Kineto's correlation ids, pushed as ATen operators start on this thread.
thread_local std::vector<uint64_t> correlation_stack;

struct DeviceRecord {
  npuActivityKind kind;  // kernel, memcpy; or sync / graph launch (host runtime events)
  bool host = false;     // a host runtime event (its issue or wait on the host's time line)
  int32_t thread = 0;
  std::string name;
  int device;
  int64_t stream;
  int64_t start_ns, end_ns;
  uint64_t correlation;
  double flops;
  int64_t bytes_read, bytes_written;
};

class NpuProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  ~NpuProfilerSession() override {
    if (handle_ != 0) {
      npuUnsubscribe(handle_);
    }
  }

  void start() override {
    start_ns_ = npuHostTimeNs();
    handle_ = npuSubscribe([this](const npuActivity& a) { record(a); });
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (handle_ != 0) {
      npuUnsubscribe(handle_);
      handle_ = 0;
    }
    end_ns_ = npuHostTimeNs();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, start_ns_, end_ns_);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*window_start*/, int64_t /*window_end*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    buffer_.span = libkineto::TraceSpan(start_ns_, end_ns_, "npu");
    buffer_.gpuOpCount = 0;
    for (const auto& r : records_) {
      if (r.host) {
        buffer_.emplace_activity(buffer_.span, libkineto::ActivityType::PRIVATEUSE1_RUNTIME, r.name);
        auto& act = *buffer_.activities.back();
        act.startTime = r.start_ns;
        act.endTime = r.end_ns;
        act.id = static_cast<int32_t>(r.correlation);
        act.device = static_cast<int32_t>(getpid());
        act.resource = r.thread;
        act.threadId = r.thread;
        if (r.kind == npuActivityKernel || r.kind == npuActivityMemcpy) {  // the arrow to the device's event
          act.flow.id = static_cast<uint32_t>(r.correlation);
          act.flow.type = libkineto::kLinkAsyncCpuGpu;
          act.flow.start = true;
        }
        act.addMetadata("device", r.device);
        act.addMetadata("simulated host us", static_cast<double>(r.end_ns - r.start_ns) / 1000.0);
        act.log(logger);
        continue;
      }
      auto type = r.kind == npuActivityKernel ? libkineto::ActivityType::CONCURRENT_KERNEL
                                              : libkineto::ActivityType::GPU_MEMCPY;
      buffer_.emplace_activity(buffer_.span, type, r.name);
      auto& act = *buffer_.activities.back();
      act.startTime = r.start_ns;
      act.endTime = r.end_ns;
      act.id = static_cast<int32_t>(r.correlation);
      act.device = r.device;
      act.resource = static_cast<int32_t>(r.stream);
      act.threadId = static_cast<int32_t>(r.stream);
      act.flow.id = static_cast<uint32_t>(r.correlation);
      act.flow.type = libkineto::kLinkAsyncCpuGpu;
      act.flow.start = false;
      act.linked = (linked && r.correlation != 0) ? linked(static_cast<int32_t>(r.correlation)) : nullptr;
      act.addMetadata("device", r.device);
      act.addMetadata("stream", r.stream);
      act.addMetadata("correlation", r.correlation);
      act.addMetadata("bytes", r.bytes_read + r.bytes_written);
      if (r.kind == npuActivityKernel) {
        act.addMetadata("flops", r.flops);
      }
      buffer_.span.opCount += 1;
      buffer_.gpuOpCount += 1;
      streams_.insert({r.device, r.stream});
      act.log(logger);
    }
    records_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, 0, "npu-lab", "NPU 0");
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_) {
      infos.push_back(libkineto::ResourceInfo{stream, stream, device, "npu stream " + std::to_string(stream)});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(buffer_));
  }

  void pushCorrelationId(uint64_t id) override {
    correlation_stack.push_back(id);
  }

  void popCorrelationId() override {
    if (!correlation_stack.empty()) {
      correlation_stack.pop_back();
    }
  }

 private:
  void record(const npuActivity& a) {
    uint64_t correlation = correlation_stack.empty() ? 0 : correlation_stack.back();
    const auto thread = static_cast<int32_t>(syscall(SYS_gettid));
    std::lock_guard<std::mutex> lock(mutex_);
    // The host's part: issuing the work, or waiting for the device.
    auto host_dur = static_cast<int64_t>((a.host_end_us - a.host_start_us) * 1000.0);
    if (host_dur > 0 || a.kind == npuActivitySync || a.kind == npuActivityGraph) {
      const char* name = a.kind == npuActivityKernel   ? "npuLaunchKernel"
                         : a.kind == npuActivityMemcpy ? "npuMemcpyAsync"
                                                       : a.name;
      DeviceRecord h{a.kind, true, thread, name, a.device, a.stream, a.host_ns, a.host_ns + host_dur, correlation,
                     0.0, 0, 0};
      records_.push_back(h);
    }
    if (a.kind == npuActivitySync || a.kind == npuActivityGraph) {
      return;
    }
    int64_t& stream_end = stream_end_[{a.device, a.stream}];
    int64_t start = std::max(a.host_ns + host_dur, stream_end);
    auto duration = static_cast<int64_t>((a.end_us - a.start_us) * 1000.0);
    stream_end = start + duration;
    records_.push_back(DeviceRecord{a.kind, false, thread, a.name, a.device, a.stream, start, start + duration,
                                    correlation, a.flops, a.bytes_read, a.bytes_written});
  }

  std::mutex mutex_;
  int handle_ = 0;
  int64_t start_ns_ = 0, end_ns_ = 0;
  libkineto::TraceStatus status_ = libkineto::TraceStatus::READY;
  std::vector<DeviceRecord> records_;
  std::map<std::pair<int, int64_t>, int64_t> stream_end_;
  std::set<std::pair<int, int64_t>> streams_;
  libkineto::CpuTraceBuffer buffer_;
};

class NpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& /*activity_types*/, const libkineto::Config& /*config*/) override {
    return std::make_unique<NpuProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"npu_lab"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                                libkineto::ActivityType::GPU_MEMCPY,
                                                libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(NpuActivityProfiler);

}  // namespace npu::profiler

namespace npu::python {

void bind_profiler(pybind11::module_& m) {
  m.def("kineto_profiler_registered", [] {
    return torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().hasFactory();
  });
}

}  // namespace npu::python
