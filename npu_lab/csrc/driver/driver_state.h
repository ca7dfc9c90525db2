// Internal state shared by the driver's source files (not part of its API).
#pragma once

#include "npu_driver.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace npu::detail {

// One simulated device: its memory accounting, its copies and its streams' clocks.
struct DeviceState {
  std::mutex mutex;
  size_t capacity = 0;      // bytes of device memory
  size_t used = 0;          // bytes handed out by npuMalloc and not yet freed
  npuTransferStats transfers;
  std::vector<double> stream_time{0.0};  // simulated time of each stream, by stream id
  double copy_engine[2] = {0.0, 0.0};    // when the host-to-device / device-to-host copy engine is free
  int64_t launches = 0;
  int64_t copies = 0;
  npuStream_t capture_stream = -1;  // the stream a graph capture runs on, or -1
  int64_t captured = 0;             // kernels and copies captured so far
};

int device_count();
bool valid_device(int device);
DeviceState& device_state(int device);
npuDeviceProp cost_model();  // a copy of the current cost model

// The host's time line. host_issue: the host spends `cost` issuing work (nothing inside a graph
// replay) and returns when it started and ended. host_wait: the host waits until `t`; returns when
// the wait started and ended.
std::pair<double, double> host_issue(double cost);
std::pair<double, double> host_wait(double t);
bool in_graph_launch();
// Whether launches and copies on this thread are accounted (npuAccountingPause), and the byte scale
// and unit of the current low-precision scope (npuLowPrecisionBegin).
bool accounting_paused();
double low_precision_scale();  // 0: no scope

// Report one activity to the subscribers (cheap when there are none).
void notify(const npuActivity& activity);
extern std::atomic<int> subscriber_count;

}  // namespace npu::detail
