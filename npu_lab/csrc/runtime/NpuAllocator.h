// The PyTorch runtime layer: the NPU's caching device allocator and its pinned host allocator.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace npu::runtime {

// Blocks are rounded up to this many bytes, like CUDA's allocator.
constexpr size_t kBlockRound = 512;

// Our own counters besides c10's DeviceStats, named as torch.npu.memory_stats() shows them.
struct NpuMemoryCounters {
  int64_t allocated = 0, peak_allocated = 0;
  int64_t reserved = 0, peak_reserved = 0;
  int64_t cached = 0;
  int64_t live_blocks = 0, peak_live_blocks = 0;
  int64_t num_allocs = 0, num_frees = 0, cache_hits = 0;
  int64_t num_ooms = 0, num_alloc_retries = 0;
};

// A caching allocator over the driver's npuMalloc/npuFree, one cache per device.
//
// A freed block goes back to its device's cache (a list per rounded size) and is
// handed out again for the next request of that size, without calling the
// driver. When the driver reports that the device is full, the allocator gives
// the whole cache back and tries once more before raising torch.OutOfMemoryError,
// as CUDA's caching allocator does.
class NpuCachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override {
    return true;
  }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // npu-lab's own interface.
  void emptyCache(int device);
  NpuMemoryCounters counters(int device);
  // Change a device's capacity; it must still hold what is in use.
  void setCapacity(int device, size_t bytes);
  // Called with ("alloc" | "free", device, bytes, allocated bytes after) when set; for profilers.
  void setListener(std::function<void(const char*, int, int64_t, int64_t)> listener);
};

NpuCachingAllocator* device_allocator();

// Memcheck (what compute-sanitizer's memcheck does for CUDA): while on, every block gets at least
// kGuardBytes of guard bytes after the bytes asked for, painted with kGuardByte; a kernel that
// writes past the end of its tensor's storage changes them. They are checked when the block is
// freed and by memcheck_scan() (every live block); each damaged block is counted and described.
constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xA5;
void memcheck_enable(bool on);
bool memcheck_enabled();
// Check every live block now; returns how many have damaged guards (also added to the report).
int64_t memcheck_scan();
// (blocks checked, damaged blocks, up to 20 descriptions of damage) since the last reset.
std::tuple<int64_t, int64_t, std::vector<std::string>> memcheck_report();
void memcheck_reset();
// The allocator of pinned host memory (what tensor.pin_memory() uses).
c10::Allocator* pinned_host_allocator();
bool is_pinned(const void* ptr);

std::string format_bytes(double bytes);

}  // namespace npu::runtime
