// The profiler's device stubs: how torch.autograd.profiler.profile(use_device="npu") times the NPU.
//
// Besides the Kineto plugin (NpuKineto.cpp), PyTorch's profiler asks each device for a small set of
// "stubs": record an event on the current stream, measure between two events, synchronize. For CUDA
// they wrap cudaEventRecord/cudaEventElapsedTime; the NPU's wrap the driver's events, so operator
// device times are read from the simulated clock.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "../driver/npu_driver.h"

namespace npu::profiler {

namespace {

struct NpuProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    int d = 0;
    npuGetDevice(&d);
    if (device != nullptr) {
      *device = static_cast<c10::DeviceIndex>(d);
    }
    npuEvent_t e = nullptr;
    npuEventCreate(&e, /*timing=*/true);
    npuStream_t stream = 0;
    npuGetCurrentStream(&stream, d);
    npuEventRecord(e, stream, d);
    *event = std::shared_ptr<void>(e, [](void* p) { npuEventDestroy(static_cast<npuEvent_t>(p)); });
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
  }

  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    double ms = 0;
    npuEventElapsedTime(&ms, static_cast<npuEvent_t>(start->get()), static_cast<npuEvent_t>(end->get()));
    return static_cast<float>(ms * 1000.0);  // microseconds, as CUDA's stubs report
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    int count = 0, current = 0;
    npuGetDeviceCount(&count);
    npuGetDevice(&current);
    for (int d = 0; d < count; ++d) {
      npuSetDevice(d);
      op(d);
    }
    npuSetDevice(current);
  }

  void synchronize() const override {
    int d = 0;
    npuGetDevice(&d);
    npuDeviceSynchronize(d);
  }
};

struct Registrar {
  Registrar() {
    static NpuProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
Registrar registrar;

}  // namespace

}  // namespace npu::profiler
