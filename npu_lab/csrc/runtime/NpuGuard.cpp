// The NPU's device guard: how PyTorch switches devices and streams and uses events.
//
// c10::DeviceGuard, c10::StreamGuard, torch.Stream, torch.Event and
// torch.accelerator all reach the device through this one interface, which
// forwards to the driver.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>

#include "NpuException.h"

namespace npu::runtime {

// While true, the guard reports no devices. The bare device (NPU_LAB_BARE=1) sets it around the first
// backward of the process: autograd's engine then starts no device worker threads (they are not used:
// npu_lab runs the backward on the calling thread) and so does not mark later fork()ed children as unable
// to run autograd. The bring-up checks run the learner's kernels in such children.
std::atomic<bool> hide_devices_from_autograd{false};

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

c10::Device device_of(int index) {
  return c10::Device(kNpu, static_cast<c10::DeviceIndex>(index));
}

int current_device() {
  int d = 0;
  npuGetDevice(&d);
  return d;
}

// Like CUDA's stream pool: a fixed set of streams per device, handed out round robin, so code that
// asks for a pool stream on every step (DDP comm hooks, torch.Stream()) does not pile up streams.
constexpr size_t kPoolSize = 8;

struct StreamPool {
  std::array<npuStream_t, kPoolSize> streams{};
  size_t made = 0;
  size_t next = 0;
};

// torch.Stream(device="npu") asks for a stream on "npu" without an index: the current device.
c10::Device concrete(c10::Device d) {
  return d.has_index() ? d : device_of(current_device());
}

struct NpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kNpu;

  c10::DeviceType type() const override {
    return kNpu;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kNpu);
    int old = current_device();
    if (d.index() != old) {
      setDevice(d);
    }
    return device_of(old);
  }

  c10::Device getDevice() const override {
    return device_of(current_device());
  }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kNpu);
    int count = 0;
    npuGetDeviceCount(&count);
    TORCH_CHECK(d.index() >= 0 && d.index() < count, "The device index is out of range. It must be in [0, ", count,
                "), but got ", static_cast<int>(d.index()), " (the simulated NPU has ", count,
                " devices: NPU_LAB_DEVICES sets how many)");
    NPU_CHECK(npuSetDevice(d.index()));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    npuSetDevice(d.index());
  }

  c10::Stream getStream(c10::Device d) const override {
    d = concrete(d);
    npuStream_t s = 0;
    NPU_CHECK(npuGetCurrentStream(&s, d.index()));
    return c10::Stream(c10::Stream::UNSAFE, d, s);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, concrete(d));
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    d = concrete(d);
    npuStream_t s = 0;
    NPU_CHECK(npuStreamCreate(&s, d.index()));
    return c10::Stream(c10::Stream::UNSAFE, d, s);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*isHighPriority*/) const override {
    d = concrete(d);
    static std::mutex mutex;
    static std::map<int, StreamPool> pools;
    std::lock_guard<std::mutex> lock(mutex);
    StreamPool& pool = pools[d.index()];
    size_t slot = pool.next++ % kPoolSize;
    if (slot >= pool.made) {  // the pool fills lazily, one new stream per first use of a slot
      NPU_CHECK(npuStreamCreate(&pool.streams[slot], d.index()));
      pool.made = slot + 1;
    }
    return c10::Stream(c10::Stream::UNSAFE, d, pool.streams[slot]);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    npuStream_t old = 0;
    NPU_CHECK(npuGetCurrentStream(&old, s.device_index()));
    NPU_CHECK(npuSetCurrentStream(s.id(), s.device_index()));
    return c10::Stream(c10::Stream::UNSAFE, s.device(), old);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    if (hide_devices_from_autograd.load()) {
      return 0;
    }
    int count = 0;
    npuGetDeviceCount(&count);
    return static_cast<c10::DeviceIndex>(count);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    npuEventDestroy(static_cast<npuEvent_t>(event));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    if (*event == nullptr) {
      npuEvent_t e = nullptr;
      // torch.Event(enable_timing=True) asks for the backend's default flag; plain events do not time.
      NPU_CHECK(npuEventCreate(&e, flag == c10::EventFlag::BACKEND_DEFAULT));
      *event = e;
    }
    NPU_CHECK(npuEventRecord(static_cast<npuEvent_t>(*event), stream.id(), stream.device_index()));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;
    }
    NPU_CHECK(npuStreamWaitEvent(stream.id(), stream.device_index(), static_cast<npuEvent_t>(event)));
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || npuEventQuery(static_cast<npuEvent_t>(event)) == npuSuccess;
  }

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;  // kernels finish on the host before their launch returns
  }

  // The host waits for the stream's (or up to the event's) work: it moves the host's time line.
  void synchronizeStream(const c10::Stream& stream) const override {
    NPU_CHECK(npuStreamSynchronize(stream.id(), stream.device_index()));
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      NPU_CHECK(npuEventSynchronize(static_cast<npuEvent_t>(event)));
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    NPU_CHECK(npuDeviceSynchronize(device_index < 0 ? current_device() : device_index));
  }

  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/, const c10::Stream& /*stream*/) const override {}

  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(event1 && event2, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    npuError_t err = npuEventElapsedTime(&ms, static_cast<npuEvent_t>(event1), static_cast<npuEvent_t>(event2));
    TORCH_CHECK(err != npuErrorNotReady, "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(err != npuErrorInvalidResourceHandle,
                "Both events must be created with argument 'enable_timing=True'.");
    NPU_CHECK(err);
    return ms;
  }

  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    return c10::DeviceCapability();  // every dtype can be stored; kernels say which they compute
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

}  // namespace npu::runtime
