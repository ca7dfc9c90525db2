// Internal state shared by the driver's source files (not part of its API).
#pragma once

#include "npu_driver.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace npu::detail {

// One simulated device: its memory accounting, its copies and its streams' clocks.
struct DeviceState {
  std::mutex mutex;
  size_t capacity = 0;      // bytes of device memory
  size_t used = 0;          // bytes handed out by npuMalloc and not yet freed
  npuTransferStats transfers;
  std::vector<double> stream_time{0.0};  // simulated time of each stream, by stream id
  int64_t launches = 0;
  int64_t copies = 0;
};

int device_count();
bool valid_device(int device);
DeviceState& device_state(int device);
npuDeviceProp cost_model();  // a copy of the current cost model

// Report one activity to the subscribers (cheap when there are none).
void notify(const npuActivity& activity);
extern std::atomic<int> subscriber_count;

}  // namespace npu::detail
