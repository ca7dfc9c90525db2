// The NPU's caching device allocator and its pinned host allocator.
#include "NpuAllocator.h"

#include "NpuException.h"

#include <c10/util/flat_hash_map.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace npu::runtime {

namespace {

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

size_t round_size(size_t nbytes) {
  return (nbytes + kBlockRound - 1) / kBlockRound * kBlockRound;
}

struct DeviceCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // rounded size -> cached blocks
  NpuMemoryCounters counters;
  c10::CachingDeviceAllocator::DeviceStats stats;
};

struct LiveBlock {
  size_t size;       // rounded size
  size_t requested;  // bytes asked for
  int device;
  bool guarded;      // allocated under memcheck: [requested, size) holds guard bytes
};

std::mutex live_mutex;
ska::flat_hash_map<void*, LiveBlock>& live_blocks() {
  static auto* m = new ska::flat_hash_map<void*, LiveBlock>();
  return *m;
}

DeviceCache& cache(int device) {
  static auto* caches = [] {
    int n = 0;
    npuGetDeviceCount(&n);
    return new std::vector<std::unique_ptr<DeviceCache>>(n);
  }();
  auto& slot = (*caches).at(device);
  static std::mutex init_mutex;
  if (!slot) {
    std::lock_guard<std::mutex> lock(init_mutex);
    if (!slot) {
      slot = std::make_unique<DeviceCache>();
    }
  }
  return *slot;
}

std::atomic<bool> memcheck_on{false};
std::mutex memcheck_mutex;
int64_t memcheck_checked = 0;
int64_t memcheck_damaged = 0;
std::vector<std::string> memcheck_notes;

// Whether the guard bytes [requested, size) of a block still hold kGuardByte; notes damage.
bool guards_intact(void* ptr, const LiveBlock& b, const char* when) {
  const auto* bytes = static_cast<const unsigned char*>(ptr);
  size_t first_bad = b.size;
  for (size_t i = b.requested; i < b.size; ++i) {
    if (bytes[i] != kGuardByte) {
      first_bad = i;
      break;
    }
  }
  std::lock_guard<std::mutex> lock(memcheck_mutex);
  memcheck_checked += 1;
  if (first_bad == b.size) {
    return true;
  }
  memcheck_damaged += 1;
  if (memcheck_notes.size() < 20) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "npu:%d block of %zu bytes: byte %zu (%zu past the end) overwritten (found %s)",
                  b.device, b.requested, first_bad, first_bad - b.requested, when);
    memcheck_notes.emplace_back(buf);
  }
  return false;
}

std::mutex listener_mutex;
std::function<void(const char*, int, int64_t, int64_t)> listener;
std::atomic<bool> has_listener{false};

void notify(const char* kind, int device, int64_t bytes, int64_t allocated) {
  if (!has_listener.load(std::memory_order_relaxed)) {
    return;
  }
  std::function<void(const char*, int, int64_t, int64_t)> fn;
  {
    std::lock_guard<std::mutex> lock(listener_mutex);
    fn = listener;
  }
  if (fn) {
    fn(kind, device, bytes, allocated);
  }
}

// Give every cached block of a device back to the driver. Caller holds c.mutex.
void release_cache(DeviceCache& c) {
  for (auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) {
      npuFree(p);
      c.counters.reserved -= static_cast<int64_t>(size);
      c.stats.reserved_bytes[kAggregate].decrease(size);
      c.stats.segment[kAggregate].decrease(1);
      c.stats.num_device_free += 1;
    }
  }
  c.stats.inactive_split_bytes[kAggregate].decrease(static_cast<size_t>(c.counters.cached));
  c.free_blocks.clear();
  c.counters.cached = 0;
}

[[noreturn]] void raise_oom(DeviceCache& c, int device, size_t nbytes) {
  size_t free = 0, total = 0;
  int current = 0;
  npuGetDevice(&current);
  npuSetDevice(device);
  npuMemGetInfo(&free, &total);
  npuSetDevice(current);
  const auto& k = c.counters;
  TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory. Tried to allocate ", format_bytes(double(nbytes)),
                   ". NPU ", device, " has a total capacity of ", format_bytes(double(total)), " of which ",
                   format_bytes(double(free)), " is free. Of the allocated memory ", format_bytes(double(k.allocated)),
                   " is allocated by tensors and ", format_bytes(double(k.reserved - k.allocated)),
                   " is reserved but unallocated. Free tensors you no longer need (del, then "
                   "torch.npu.empty_cache()) or raise the capacity with npu_lab.set_memory_capacity().");
}

void free_block(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  LiveBlock b{};
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    auto it = live_blocks().find(ptr);
    TORCH_INTERNAL_ASSERT(it != live_blocks().end(), "npu allocator: free of an unknown pointer");
    b = it->second;
    live_blocks().erase(it);
  }
  if (b.guarded) {
    guards_intact(ptr, b, "when it was freed");
  }
  DeviceCache& c = cache(b.device);
  int64_t allocated = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto& k = c.counters;
    k.allocated -= static_cast<int64_t>(b.size);
    k.live_blocks -= 1;
    k.num_frees += 1;
    k.cached += static_cast<int64_t>(b.size);
    c.free_blocks[b.size].push_back(ptr);
    c.stats.allocation[kAggregate].decrease(1);
    c.stats.active[kAggregate].decrease(1);
    c.stats.allocated_bytes[kAggregate].decrease(b.size);
    c.stats.active_bytes[kAggregate].decrease(b.size);
    c.stats.requested_bytes[kAggregate].decrease(b.requested);
    c.stats.inactive_split_bytes[kAggregate].increase(b.size);
    allocated = k.allocated;
  }
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(ptr, -static_cast<int64_t>(b.size), static_cast<size_t>(allocated),
                                     static_cast<size_t>(c.counters.reserved),
                                     c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(b.device)));
  }
  notify("free", b.device, static_cast<int64_t>(b.size), allocated);
}

NpuCachingAllocator g_allocator;

}  // namespace

std::string format_bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && (n >= 1024 || n <= -1024)) {
    n /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%lld bytes", static_cast<long long>(n));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", n, units[u]);
  }
  return buf;
}

c10::DataPtr NpuCachingAllocator::allocate(size_t nbytes) {
  int device = 0;
  NPU_CHECK(npuGetDevice(&device));
  const c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  if (nbytes == 0) {
    return {nullptr, nullptr, &free_block, where};
  }
  const bool guarded = memcheck_on.load();
  const size_t size = round_size(guarded ? nbytes + kGuardBytes : nbytes);
  DeviceCache& c = cache(device);
  void* ptr = nullptr;
  int64_t allocated = 0, reserved = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto& k = c.counters;
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      k.cached -= static_cast<int64_t>(size);
      k.cache_hits += 1;
      c.stats.inactive_split_bytes[kAggregate].decrease(size);
    } else {
      npuError_t err = npuMalloc(&ptr, size);
      if (err == npuErrorMemoryAllocation) {
        // Like CUDA: give the cache back and try once more before failing.
        k.num_alloc_retries += 1;
        c.stats.num_alloc_retries += 1;
        release_cache(c);
        err = npuMalloc(&ptr, size);
        if (err == npuErrorMemoryAllocation) {
          k.num_ooms += 1;
          c.stats.num_ooms += 1;
          raise_oom(c, device, nbytes);
        }
      }
      NPU_CHECK(err);
      k.reserved += static_cast<int64_t>(size);
      k.peak_reserved = std::max(k.peak_reserved, k.reserved);
      c.stats.reserved_bytes[kAggregate].increase(size);
      c.stats.segment[kAggregate].increase(1);
      c.stats.num_device_alloc += 1;
    }
    k.allocated += static_cast<int64_t>(size);
    k.peak_allocated = std::max(k.peak_allocated, k.allocated);
    k.live_blocks += 1;
    k.peak_live_blocks = std::max(k.peak_live_blocks, k.live_blocks);
    k.num_allocs += 1;
    c.stats.allocation[kAggregate].increase(1);
    c.stats.active[kAggregate].increase(1);
    c.stats.allocated_bytes[kAggregate].increase(size);
    c.stats.active_bytes[kAggregate].increase(size);
    c.stats.requested_bytes[kAggregate].increase(nbytes);
    allocated = k.allocated;
    reserved = k.reserved;
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live_blocks()[ptr] = LiveBlock{size, nbytes, device, guarded};
  }
  if (guarded) {
    std::memset(static_cast<char*>(ptr) + nbytes, kGuardByte, size - nbytes);
  }
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(ptr, static_cast<int64_t>(size), static_cast<size_t>(allocated),
                                     static_cast<size_t>(reserved), where);
  }
  notify("alloc", device, static_cast<int64_t>(size), allocated);
  return {ptr, ptr, &free_block, where};
}

void memcheck_enable(bool on) {
  memcheck_on.store(on);
}

bool memcheck_enabled() {
  return memcheck_on.load();
}

int64_t memcheck_scan() {
  std::vector<std::pair<void*, LiveBlock>> blocks;
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    for (const auto& [ptr, b] : live_blocks()) {
      if (b.guarded) {
        blocks.emplace_back(ptr, b);
      }
    }
  }
  int64_t damaged = 0;
  for (const auto& [ptr, b] : blocks) {
    if (!guards_intact(ptr, b, "by memcheck_scan")) {
      damaged += 1;
      std::lock_guard<std::mutex> lock(live_mutex);  // reported once: not checked again
      auto it = live_blocks().find(ptr);
      if (it != live_blocks().end()) {
        it->second.guarded = false;
      }
    }
  }
  return damaged;
}

std::tuple<int64_t, int64_t, std::vector<std::string>> memcheck_report() {
  std::lock_guard<std::mutex> lock(memcheck_mutex);
  return {memcheck_checked, memcheck_damaged, memcheck_notes};
}

void memcheck_reset() {
  std::lock_guard<std::mutex> lock(memcheck_mutex);
  memcheck_checked = memcheck_damaged = 0;
  memcheck_notes.clear();
}

c10::DeleterFnPtr NpuCachingAllocator::raw_deleter() const {
  return &free_block;
}

void NpuCachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  NPU_CHECK(npuMemcpy(dest, src, count, npuMemcpyDeviceToDevice));
}

void NpuCachingAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  int n = 0;
  npuGetDeviceCount(&n);
  for (int i = 0; i < n; ++i) {
    emptyCache(i);
  }
}

void NpuCachingAllocator::emptyCache(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cache(c);
}

void NpuCachingAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {
  // Kernels finish on the host before their launch returns, so a block is never
  // still in use by another stream when it is freed: nothing to track.
}

c10::CachingDeviceAllocator::DeviceStats NpuCachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

// Every StatArray of c10's DeviceStats, each entry (aggregate, small pool, large pool) passed to fn.
template <typename Fn>
void each_stat(c10::CachingDeviceAllocator::DeviceStats& s, Fn fn) {
  for (auto* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes, &s.reserved_bytes,
                      &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (auto& stat : *array) {
      fn(stat);
    }
  }
}

void NpuCachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  each_stat(c.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  c.stats.num_alloc_retries = 0;
  c.stats.num_ooms = 0;
  c.stats.num_device_alloc = 0;
  c.stats.num_device_free = 0;
  c.counters.num_allocs = c.counters.num_frees = c.counters.cache_hits = 0;
  c.counters.num_ooms = c.counters.num_alloc_retries = 0;
}

void NpuCachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  each_stat(c.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
  auto& k = c.counters;
  k.peak_allocated = k.allocated;
  k.peak_reserved = k.reserved;
  k.peak_live_blocks = k.live_blocks;
}

std::pair<size_t, size_t> NpuCachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  int current = 0;
  npuGetDevice(&current);
  NPU_CHECK(npuSetDevice(device));
  size_t free = 0, total = 0;
  npuMemGetInfo(&free, &total);
  npuSetDevice(current);
  return {free, total};
}

NpuMemoryCounters NpuCachingAllocator::counters(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.counters;
}

void NpuCachingAllocator::setCapacity(int device, size_t bytes) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cache(c);
  npuError_t err = npuDeviceSetCapacity(device, bytes);
  TORCH_CHECK_VALUE(err != npuErrorInvalidValue, "cannot shrink npu:", device, " to ", format_bytes(double(bytes)),
                    ": ", format_bytes(double(c.counters.reserved)), " is in use");
  NPU_CHECK(err);
}

void NpuCachingAllocator::setListener(std::function<void(const char*, int, int64_t, int64_t)> fn) {
  std::lock_guard<std::mutex> lock(listener_mutex);
  listener = std::move(fn);
  has_listener.store(static_cast<bool>(listener));
}

NpuCachingAllocator* device_allocator() {
  return &g_allocator;
}

// -- pinned host memory ------------------------------------------------------------------------
namespace {

void free_pinned(void* ptr) {
  npuFreeHost(ptr);
}

struct PinnedHostAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      NPU_CHECK(npuMallocHost(&ptr, nbytes));
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedHostAllocator g_pinned;

}  // namespace

c10::Allocator* pinned_host_allocator() {
  return &g_pinned;
}

bool is_pinned(const void* ptr) {
  npuPointerAttributes attr{};
  npuPointerGetAttributes(&attr, ptr);
  return attr.type == npuMemoryTypeHost;
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

}  // namespace npu::runtime
