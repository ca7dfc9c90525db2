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

npuError_t npuAccountCopy(npuMemcpyKind kind, size_t bytes, int device, int peer, const char* label,
                          unsigned flags) {
  if (!valid_device(device) || (kind == npuMemcpyPeer && !valid_device(peer))) {
    return npuErrorInvalidDevice;
  }
  if (accounting_paused()) {
    return npuSuccess;
  }
  npuDeviceProp m = cost_model();
  double us = 0;
  const char* name = "";
  auto n = static_cast<int64_t>(bytes);
  const bool host_side = kind == npuMemcpyHostToDevice || kind == npuMemcpyDeviceToHost;
  const bool pinned = (flags & npuCopyPinned) != 0;
  const bool async = pinned && (flags & npuCopyAsync) != 0;  // from pageable memory, a copy is synchronous
  switch (kind) {
    case npuMemcpyHostToDevice:
      us = m.link_latency_us + double(bytes) / (m.link_gbs * 1e3);
      name = pinned ? "memcpy HtoD (pinned)" : "memcpy HtoD";
      break;
    case npuMemcpyDeviceToHost:
      us = m.link_latency_us + double(bytes) / (m.link_gbs * 1e3);
      name = pinned ? "memcpy DtoH (pinned)" : "memcpy DtoH";
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
  // Pageable host memory goes through a pinned staging buffer: a host memcpy before the transfer
  // (to the device) or after it (to the host).
  const double staging = host_side && !pinned && m.host_memcpy_gbs > 0 ? double(bytes) / (m.host_memcpy_gbs * 1e3) : 0.0;
  npuStream_t stream = 0;
  npuGetCurrentStream(&stream, device);
  DeviceState& d = device_state(device);
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.capture_stream >= 0) {
      if (host_side && !async) {
        return npuErrorStreamCaptureUnsupported;  // a synchronous copy cannot be part of a graph
      }
      d.captured += 1;
      return npuSuccess;
    }
  }
  auto host = host_issue(m.host_launch_us + (kind == npuMemcpyHostToDevice ? staging : 0.0));
  double start = 0, end = 0;
  {
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
    start = std::max(d.stream_time[stream], host.second);
    if (host_side) {
      // One copy engine per direction: copies in one direction queue behind each other, and run
      // beside kernels on other streams.
      double& engine = d.copy_engine[kind == npuMemcpyHostToDevice ? 0 : 1];
      start = std::max(start, engine);
      engine = start + us;
    }
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
  std::pair<double, double> wait{host.second, host.second};
  if (host_side && !async) {
    // The host waits for the transfer (and then, to the host, copies out of the staging buffer).
    wait = host_wait(end);
    if (kind == npuMemcpyDeviceToHost && staging > 0) {
      wait.second = host_issue(staging).second;
    }
  }
  if (subscriber_count.load(std::memory_order_relaxed) > 0) {
    notify(npuActivity{npuActivityMemcpy, name, device, stream, 0.0, n, n, start, end, host.first, host.second,
                       npuHostTimeNs()});
    if (wait.second > wait.first) {
      notify(npuActivity{npuActivitySync, kind == npuMemcpyHostToDevice ? "wait for memcpy HtoD" : "wait for memcpy DtoH",
                         device, stream, 0.0, 0, 0, wait.first, wait.second, wait.first, wait.second, npuHostTimeNs()});
    }
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
  const npuPointerAttributes& host = kind == npuMemcpyHostToDevice ? b : a;
  unsigned flags = host.type == npuMemoryTypeHost ? npuCopyPinned : npuCopyPageable;
  return npuAccountCopy(kind, bytes, device, peer, nullptr, flags);
}

}  // namespace npu
