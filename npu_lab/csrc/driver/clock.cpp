// Streams, events and the simulated clock of each device, and activity tracing.
#include "driver_state.h"

#include <algorithm>
#include <ctime>

namespace npu {
using namespace detail;

namespace detail {

std::atomic<int> subscriber_count{0};

namespace {

std::mutex subscribers_mutex;
std::vector<std::pair<int, npuActivityCallback>>& subscribers() {
  static auto* s = new std::vector<std::pair<int, npuActivityCallback>>();
  return *s;
}
int next_subscriber = 1;

}  // namespace

void notify(const npuActivity& activity) {
  std::vector<npuActivityCallback> callbacks;
  {
    std::lock_guard<std::mutex> lock(subscribers_mutex);
    for (auto& s : subscribers()) {
      callbacks.push_back(s.second);
    }
  }
  for (auto& fn : callbacks) {
    fn(activity);
  }
}

}  // namespace detail

namespace {

// The current stream of each device, per thread (default: stream 0).
thread_local std::vector<npuStream_t> current_streams;

std::atomic<int64_t> next_event_id{1};

// Run fn(device state) with the device's lock held, once the device and the stream are known to exist.
template <typename Fn>
npuError_t on_stream(int device, npuStream_t stream, Fn fn) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  if (stream < 0 || static_cast<size_t>(stream) >= d.stream_time.size()) {
    return npuErrorInvalidResourceHandle;
  }
  fn(d);
  return npuSuccess;
}

}  // namespace

struct npuEvent {
  int64_t id;
  bool timing;
  bool recorded = false;
  int device = -1;
  double time_us = 0;
};

int npuSubscribe(npuActivityCallback callback) {
  std::lock_guard<std::mutex> lock(subscribers_mutex);
  int handle = next_subscriber++;
  subscribers().emplace_back(handle, std::move(callback));
  subscriber_count.store(static_cast<int>(subscribers().size()));
  return handle;
}

void npuUnsubscribe(int handle) {
  std::lock_guard<std::mutex> lock(subscribers_mutex);
  auto& s = subscribers();
  s.erase(std::remove_if(s.begin(), s.end(), [&](auto& p) { return p.first == handle; }), s.end());
  subscriber_count.store(static_cast<int>(s.size()));
}

int64_t npuHostTimeNs() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

npuError_t npuStreamCreate(npuStream_t* stream, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  // A new stream starts idle at the device's latest time.
  double latest = *std::max_element(d.stream_time.begin(), d.stream_time.end());
  d.stream_time.push_back(latest);
  *stream = static_cast<npuStream_t>(d.stream_time.size() - 1);
  return npuSuccess;
}

npuError_t npuGetCurrentStream(npuStream_t* stream, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  *stream = static_cast<size_t>(device) < current_streams.size() ? current_streams[device] : 0;
  return npuSuccess;
}

npuError_t npuSetCurrentStream(npuStream_t stream, int device) {
  npuError_t err = on_stream(device, stream, [](DeviceState&) {});
  if (err != npuSuccess) {
    return err;
  }
  if (current_streams.size() < static_cast<size_t>(device_count())) {
    current_streams.resize(device_count(), 0);
  }
  current_streams[device] = stream;
  return npuSuccess;
}

npuError_t npuStreamTime(double* time_us, npuStream_t stream, int device) {
  return on_stream(device, stream, [&](DeviceState& d) { *time_us = d.stream_time[stream]; });
}

npuError_t npuStreamWaitUntil(npuStream_t stream, int device, double time_us) {
  return on_stream(device, stream,
                   [&](DeviceState& d) { d.stream_time[stream] = std::max(d.stream_time[stream], time_us); });
}

npuError_t npuDeviceSynchronize(int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  double latest = *std::max_element(d.stream_time.begin(), d.stream_time.end());
  std::fill(d.stream_time.begin(), d.stream_time.end(), latest);
  return npuSuccess;
}

npuError_t npuGetLaunchCounts(int64_t* launches, int64_t* copies, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  *launches = d.launches;
  *copies = d.copies;
  return npuSuccess;
}

npuError_t npuLaunchKernel(const char* name, double flops, int64_t bytes_read, int64_t bytes_written,
                           int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  npuDeviceProp m = cost_model();
  double compute = flops / (m.peak_gflops * 1e3);
  double memory = double(bytes_read + bytes_written) / (m.bandwidth_gbs * 1e3);
  double us = m.launch_us + std::max(compute, memory);
  npuStream_t stream = 0;
  npuGetCurrentStream(&stream, device);
  double start = 0, end = 0;
  {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mutex);
    if (static_cast<size_t>(stream) >= d.stream_time.size()) {
      stream = 0;
    }
    start = d.stream_time[stream];
    end = start + us;
    d.stream_time[stream] = end;
    d.launches += 1;
  }
  if (subscriber_count.load(std::memory_order_relaxed) > 0) {
    notify(npuActivity{npuActivityKernel, name, device, stream, flops, bytes_read, bytes_written, start, end,
                       npuHostTimeNs()});
  }
  return npuSuccess;
}

npuError_t npuEventCreate(npuEvent_t* event, bool timing) {
  *event = new npuEvent{next_event_id.fetch_add(1), timing};
  return npuSuccess;
}

npuError_t npuEventDestroy(npuEvent_t event) {
  delete event;
  return npuSuccess;
}

npuError_t npuEventRecord(npuEvent_t event, npuStream_t stream, int device) {
  if (event == nullptr) {
    return npuErrorInvalidResourceHandle;
  }
  const double cost = cost_model().event_us;
  return on_stream(device, stream, [&](DeviceState& d) {
    event->recorded = true;
    event->device = device;
    event->time_us = d.stream_time[stream];
    d.stream_time[stream] += cost;
  });
}

npuError_t npuStreamWaitEvent(npuStream_t stream, int device, npuEvent_t event) {
  if (event == nullptr) {
    return npuErrorInvalidResourceHandle;
  }
  if (!event->recorded) {
    return npuSuccess;  // waiting on an event that was never recorded is a no-op, as in CUDA
  }
  return npuStreamWaitUntil(stream, device, event->time_us);
}

npuError_t npuEventQuery(npuEvent_t event) {
  return event == nullptr ? npuErrorInvalidResourceHandle : npuSuccess;
}

npuError_t npuEventElapsedTime(double* ms, npuEvent_t start, npuEvent_t end) {
  if (start == nullptr || end == nullptr || !start->recorded || !end->recorded) {
    return npuErrorNotReady;
  }
  if (!start->timing || !end->timing) {
    return npuErrorInvalidResourceHandle;
  }
  *ms = (end->time_us - start->time_us) / 1000.0;
  return npuSuccess;
}

npuError_t npuEventInfo(npuEvent_t event, double* time_us, int* device, int64_t* id, bool* recorded,
                        bool* timing) {
  if (event == nullptr) {
    return npuErrorInvalidResourceHandle;
  }
  *time_us = event->time_us;
  *device = event->device;
  *id = event->id;
  *recorded = event->recorded;
  *timing = event->timing;
  return npuSuccess;
}

}  // namespace npu
