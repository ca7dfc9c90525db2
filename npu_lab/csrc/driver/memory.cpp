// Device memory, pinned host memory, pointer attributes and copies.
//
// Host memory stands in for device memory: an allocation is real bytes with a
// real address, so PyTorch storages, NumPy arrays and numba kernels can all
// use it without copies. What makes it *device* memory is the bookkeeping:
// each allocation belongs to one device, counts against that device's
// capacity, and every copy across the host/device boundary is counted and
// costed on the device's clock.
#include "driver_state.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>

namespace npu {
using namespace detail;

namespace {

constexpr size_t kAlignment = 64;               // a cache line / one AVX-512 vector
constexpr size_t kMmapThreshold = size_t(1) << 20;  // large blocks come straight from the OS

struct Allocation {
  size_t size;
  int device;  // -1 for pinned host memory
  bool mapped;
};

std::mutex registry_mutex;
// start address -> allocation; ordered, so any address inside an allocation can be looked up
std::map<uintptr_t, Allocation>& registry() {
  static auto* r = new std::map<uintptr_t, Allocation>();
  return *r;
}

void* raw_alloc(size_t size, bool* mapped) {
  if (size >= kMmapThreshold) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *mapped = true;
    return p == MAP_FAILED ? nullptr : p;
  }
  *mapped = false;
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

void raw_free(void* ptr, const Allocation& a) {
  if (a.mapped) {
    munmap(ptr, a.size);
  } else {
    std::free(ptr);
  }
}

npuError_t allocate(void** ptr, size_t size, int device) {
  if (ptr == nullptr) {
    return npuErrorInvalidValue;
  }
  *ptr = nullptr;
  if (size == 0) {
    return npuSuccess;
  }
  if (device >= 0) {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.used + size > d.capacity) {
      return npuErrorMemoryAllocation;
    }
    d.used += size;
  }
  bool mapped = false;
  void* p = raw_alloc(size, &mapped);
  if (p == nullptr) {
    if (device >= 0) {
      DeviceState& d = device_state(device);
      std::lock_guard<std::mutex> lock(d.mutex);
      d.used -= size;
    }
    return npuErrorMemoryAllocation;
  }
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry()[reinterpret_cast<uintptr_t>(p)] = Allocation{size, device, mapped};
  }
  *ptr = p;
  return npuSuccess;
}

npuError_t release(void* ptr, bool host) {
  if (ptr == nullptr) {
    return npuSuccess;
  }
  Allocation a{};
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == registry().end() || (it->second.device < 0) != host) {
      return npuErrorInvalidValue;
    }
    a = it->second;
    registry().erase(it);
  }
  raw_free(ptr, a);
  if (a.device >= 0) {
    DeviceState& d = device_state(a.device);
    std::lock_guard<std::mutex> lock(d.mutex);
    d.used -= a.size;
  }
  return npuSuccess;
}

int current() {
  int device = 0;
  npuGetDevice(&device);
  return device;
}

}  // namespace

npuError_t npuMalloc(void** ptr, size_t size) {
  return allocate(ptr, size, current());
}

npuError_t npuFree(void* ptr) {
  return release(ptr, /*host=*/false);
}

npuError_t npuMallocHost(void** ptr, size_t size) {
  return allocate(ptr, size, -1);
}

npuError_t npuFreeHost(void* ptr) {
  return release(ptr, /*host=*/true);
}

npuError_t npuMemGetInfo(size_t* free, size_t* total) {
  DeviceState& d = device_state(current());
  std::lock_guard<std::mutex> lock(d.mutex);
  *free = d.capacity - d.used;
  *total = d.capacity;
  return npuSuccess;
}

npuError_t npuPointerGetAttributes(npuPointerAttributes* attr, const void* ptr) {
  *attr = npuPointerAttributes{};
  auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& r = registry();
  auto it = r.upper_bound(address);
  if (it == r.begin()) {
    return npuSuccess;
  }
  --it;
  if (address >= it->first + it->second.size) {
    return npuSuccess;
  }
  attr->type = it->second.device < 0 ? npuMemoryTypeHost : npuMemoryTypeDevice;
  attr->device = it->second.device;
  attr->base = reinterpret_cast<void*>(it->first);
  attr->size = it->second.size;
  return npuSuccess;
}

npuError_t npuGetTransferStats(npuTransferStats* stats, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  *stats = d.transfers;
  return npuSuccess;
}

npuError_t npuAccountCopy(npuMemcpyKind kind, size_t bytes, int device, int peer, const char* label) {
  if (!valid_device(device) || (kind == npuMemcpyPeer && !valid_device(peer))) {
    return npuErrorInvalidDevice;
  }
  npuDeviceProp m = cost_model();
  double us = 0;
  const char* name = "";
  auto n = static_cast<int64_t>(bytes);
  switch (kind) {
    case npuMemcpyHostToDevice:
      us = m.link_latency_us + double(bytes) / (m.link_gbs * 1e3);
      name = "memcpy HtoD";
      break;
    case npuMemcpyDeviceToHost:
      us = m.link_latency_us + double(bytes) / (m.link_gbs * 1e3);
      name = "memcpy DtoH";
      break;
    case npuMemcpyDeviceToDevice:
      // A copy kernel: reads and writes every byte in device memory.
      us = m.launch_us + 2.0 * double(bytes) / (m.bandwidth_gbs * 1e3);
      name = "memcpy DtoD";
      break;
    case npuMemcpyPeer:
      us = m.peer_latency_us + double(bytes) / (m.peer_gbs * 1e3);
      name = "memcpy PtoP";
      break;
    default:
      return npuErrorInvalidValue;
  }
  if (label != nullptr) {
    name = label;
  }
  npuStream_t stream = 0;
  npuGetCurrentStream(&stream, device);
  double start = 0, end = 0;
  {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mutex);
    npuTransferStats& t = d.transfers;
    switch (kind) {
      case npuMemcpyHostToDevice:
        t.host_to_device_bytes += n;
        t.host_to_device_copies += 1;
        break;
      case npuMemcpyDeviceToHost:
        t.device_to_host_bytes += n;
        t.device_to_host_copies += 1;
        break;
      case npuMemcpyDeviceToDevice:
        t.device_to_device_bytes += n;
        t.device_to_device_copies += 1;
        break;
      default:
        t.peer_bytes += n;
        t.peer_copies += 1;
    }
    if (static_cast<size_t>(stream) >= d.stream_time.size()) {
      stream = 0;
    }
    start = d.stream_time[stream];
    end = start + us;
    d.stream_time[stream] = end;
    d.copies += 1;
  }
  if (kind == npuMemcpyPeer && peer != device) {
    DeviceState& p = device_state(peer);
    std::lock_guard<std::mutex> lock(p.mutex);
    p.transfers.peer_bytes += n;
    p.transfers.peer_copies += 1;
  }
  if (subscriber_count.load(std::memory_order_relaxed) > 0) {
    notify(npuActivity{npuActivityMemcpy, name, device, stream, 0.0, n, n, start, end, npuHostTimeNs()});
  }
  return npuSuccess;
}

npuError_t npuMemcpy(void* dst, const void* src, size_t bytes, npuMemcpyKind kind) {
  npuPointerAttributes a{}, b{};
  npuPointerGetAttributes(&a, dst);
  npuPointerGetAttributes(&b, src);
  int device = current();
  int peer = -1;
  switch (kind) {
    case npuMemcpyHostToDevice:
      if (a.type != npuMemoryTypeDevice) return npuErrorInvalidValue;
      device = a.device;
      break;
    case npuMemcpyDeviceToHost:
      if (b.type != npuMemoryTypeDevice) return npuErrorInvalidValue;
      device = b.device;
      break;
    case npuMemcpyDeviceToDevice:
    case npuMemcpyPeer:
      if (a.type != npuMemoryTypeDevice || b.type != npuMemoryTypeDevice) return npuErrorInvalidValue;
      device = a.device;
      peer = b.device;
      kind = a.device == b.device ? npuMemcpyDeviceToDevice : npuMemcpyPeer;
      break;
    default:
      return npuErrorInvalidValue;
  }
  if (bytes != 0) {
    std::memmove(dst, src, bytes);
  }
  return npuAccountCopy(kind, bytes, device, peer);
}

}  // namespace npu
