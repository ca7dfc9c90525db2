// Devices: how many, which one each thread uses, initialisation and its cost model.
#include "driver_state.h"

#include <pthread.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace npu {
namespace detail {

namespace {

constexpr int kMaxDevices = 16;

int read_device_count() {
  const char* env = std::getenv("NPU_LAB_DEVICES");
  if (env == nullptr || *env == '\0') {
    return 2;
  }
  int n = std::atoi(env);
  if (n < 1) {
    n = 1;
  }
  return n > kMaxDevices ? kMaxDevices : n;
}

size_t read_capacity() {
  const char* env = std::getenv("NPU_LAB_MEMORY_GB");
  if (env == nullptr || *env == '\0') {
    return size_t(4) << 30;
  }
  double gb = std::atof(env);
  return gb > 0 ? static_cast<size_t>(gb * double(size_t(1) << 30)) : size_t(4) << 30;
}

struct Devices {
  int count = read_device_count();
  std::unique_ptr<DeviceState[]> states{new DeviceState[kMaxDevices]};
  Devices() {
    size_t capacity = read_capacity();
    for (int i = 0; i < count; ++i) {
      states[i].capacity = capacity;
    }
  }
};

Devices& devices() {
  static Devices* d = new Devices();  // never destroyed: storages may be freed during interpreter exit
  return *d;
}

std::mutex prop_mutex;
npuDeviceProp global_prop;

std::atomic<bool> initialized{false};
std::atomic<bool> in_bad_fork{false};
thread_local int current_device = 0;

void forked_child() {
  if (initialized.load()) {
    in_bad_fork.store(true);
  }
}

}  // namespace

int device_count() {
  return devices().count;
}

bool valid_device(int device) {
  return device >= 0 && device < devices().count;
}

DeviceState& device_state(int device) {
  return devices().states[device];
}

npuDeviceProp cost_model() {
  std::lock_guard<std::mutex> lock(prop_mutex);
  return global_prop;
}

}  // namespace detail

using namespace detail;

const char* npuGetErrorString(npuError_t error) {
  switch (error) {
    case npuSuccess:
      return "no error";
    case npuErrorInvalidValue:
      return "invalid argument";
    case npuErrorMemoryAllocation:
      return "out of memory";
    case npuErrorInvalidDevice:
      return "invalid device ordinal";
    case npuErrorInvalidResourceHandle:
      return "invalid resource handle";
    case npuErrorNotReady:
      return "device not ready";
    case npuErrorInitializationError:
      return "initialization error";
    case npuErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case npuErrorStreamCaptureInvalidated:
      return "graph capture must run on a non-default stream, and begin and end once";
  }
  return "unknown error";
}

npuError_t npuGetDeviceCount(int* count) {
  *count = device_count();
  return npuSuccess;
}

npuError_t npuGetDevice(int* device) {
  *device = current_device;
  return npuSuccess;
}

npuError_t npuSetDevice(int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  current_device = device;
  return npuSuccess;
}

npuError_t npuInit() {
  if (in_bad_fork.load()) {
    return npuErrorInitializationError;
  }
  bool expected = false;
  if (initialized.compare_exchange_strong(expected, true)) {
    pthread_atfork(nullptr, nullptr, &forked_child);
  }
  return npuSuccess;
}

bool npuIsInitialized() {
  return initialized.load() && !in_bad_fork.load();
}

bool npuIsInBadFork() {
  return in_bad_fork.load();
}

npuError_t npuGetDeviceProperties(npuDeviceProp* prop, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  *prop = cost_model();
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  prop->total_memory = d.capacity;
  return npuSuccess;
}

npuError_t npuSetCostModel(const npuDeviceProp& prop) {
  if (prop.peak_gflops <= 0 || prop.bandwidth_gbs <= 0 || prop.link_gbs <= 0 || prop.peer_gbs <= 0 ||
      prop.launch_us < 0 || prop.link_latency_us < 0 || prop.peer_latency_us < 0 || prop.event_us < 0 ||
      prop.matrix_gflops < 0 || prop.matrix16_gflops < 0 || prop.host_launch_us < 0 || prop.host_memcpy_gbs < 0) {
    return npuErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(prop_mutex);
  global_prop = prop;
  return npuSuccess;
}

npuError_t npuDeviceSetCapacity(int device, size_t bytes) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  if (bytes < d.used) {
    return npuErrorInvalidValue;
  }
  d.capacity = bytes;
  return npuSuccess;
}

}  // namespace npu
