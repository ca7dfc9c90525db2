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

std::mutex host_mutex;
double host_time = 0.0;
thread_local int graph_launch_depth = 0;
thread_local int pause_depth = 0;
thread_local std::vector<double> low_precision_scopes;  // byte scales; only on a chip with 16-bit units

}  // namespace

bool accounting_paused() {
  return pause_depth > 0;
}

double low_precision_scale() {
  return low_precision_scopes.empty() ? 0.0 : low_precision_scopes.back();
}

std::pair<double, double> host_issue(double cost) {
  std::lock_guard<std::mutex> lock(host_mutex);
  double start = host_time;
  if (graph_launch_depth == 0) {
    host_time += cost;
  }
  return {start, host_time};
}

std::pair<double, double> host_wait(double t) {
  std::lock_guard<std::mutex> lock(host_mutex);
  double start = host_time;
  host_time = std::max(host_time, t);
  return {start, host_time};
}

bool in_graph_launch() {
  return graph_launch_depth > 0;
}

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

namespace {

void notify_sync(const char* name, int device, npuStream_t stream, std::pair<double, double> wait) {
  if (subscriber_count.load(std::memory_order_relaxed) > 0 && wait.second > wait.first) {
    notify(npuActivity{npuActivitySync, name, device, stream, 0.0, 0, 0, wait.first, wait.second, wait.first,
                       wait.second, npuHostTimeNs()});
  }
}

}  // namespace

npuError_t npuDeviceSynchronize(int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  double latest = 0;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.capture_stream >= 0) {
      return npuErrorStreamCaptureUnsupported;
    }
    latest = *std::max_element(d.stream_time.begin(), d.stream_time.end());
    latest = std::max({latest, d.copy_engine[0], d.copy_engine[1]});
    std::fill(d.stream_time.begin(), d.stream_time.end(), latest);
  }
  notify_sync("npuDeviceSynchronize", device, 0, host_wait(latest));
  return npuSuccess;
}

npuError_t npuStreamSynchronize(npuStream_t stream, int device) {
  double t = 0;
  npuError_t err = on_stream(device, stream, [&](DeviceState& d) {
    t = d.capture_stream >= 0 ? -1.0 : d.stream_time[stream];
  });
  if (err != npuSuccess) {
    return err;
  }
  if (t < 0) {
    return npuErrorStreamCaptureUnsupported;
  }
  notify_sync("npuStreamSynchronize", device, stream, host_wait(t));
  return npuSuccess;
}

npuError_t npuLowPrecisionBegin(double byte_scale, bool* native) {
  if (!(byte_scale > 0.0) || byte_scale > 1.0) {
    return npuErrorInvalidValue;
  }
  *native = cost_model().matrix16_gflops > 0;
  low_precision_scopes.push_back(*native ? byte_scale : 0.0);
  return npuSuccess;
}

npuError_t npuLowPrecisionEnd() {
  if (low_precision_scopes.empty()) {
    return npuErrorInvalidValue;
  }
  low_precision_scopes.pop_back();
  return npuSuccess;
}

void npuAccountingPause(bool pause) {
  pause_depth = std::max(0, pause_depth + (pause ? 1 : -1));
}

bool npuAccountingPaused() {
  return pause_depth > 0;
}

double npuHostTime() {
  return host_issue(0.0).second;
}

void npuHostWaitUntil(double time_us) {
  host_wait(time_us);
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

double unit_gflops(const npuDeviceProp& m, npuUnit unit) {
  if (unit == npuUnitMatrix16 && m.matrix16_gflops > 0) {
    return m.matrix16_gflops;
  }
  if (unit != npuUnitVector && m.matrix_gflops > 0) {
    return m.matrix_gflops;
  }
  return m.peak_gflops;
}

npuError_t npuLaunchKernel(const char* name, double flops, int64_t bytes_read, int64_t bytes_written,
                           int device, npuUnit unit) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  if (accounting_paused()) {
    return npuSuccess;
  }
  npuDeviceProp m = cost_model();
  const double low = low_precision_scale();
  if (low > 0) {  // float32 stand-ins for 16-bit operands, on a chip with 16-bit units
    unit = unit == npuUnitVector ? unit : npuUnitMatrix16;
    bytes_read = static_cast<int64_t>(double(bytes_read) * low);
    bytes_written = static_cast<int64_t>(double(bytes_written) * low);
  }
  double compute = flops / (unit_gflops(m, unit) * 1e3);
  double memory = double(bytes_read + bytes_written) / (m.bandwidth_gbs * 1e3);
  double us = m.launch_us + std::max(compute, memory);
  npuStream_t stream = 0;
  npuGetCurrentStream(&stream, device);
  DeviceState& d = device_state(device);
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.capture_stream >= 0) {
      d.captured += 1;  // recorded into the graph: it runs on the clock when the graph is replayed
      return npuSuccess;
    }
  }
  auto host = host_issue(m.host_launch_us);
  double start = 0, end = 0;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (static_cast<size_t>(stream) >= d.stream_time.size()) {
      stream = 0;
    }
    start = std::max(d.stream_time[stream], host.second);
    end = start + us;
    d.stream_time[stream] = end;
    d.launches += 1;
  }
  if (subscriber_count.load(std::memory_order_relaxed) > 0) {
    notify(npuActivity{npuActivityKernel, name, device, stream, flops, bytes_read, bytes_written, start, end,
                       host.first, host.second, npuHostTimeNs()});
  }
  return npuSuccess;
}

npuError_t npuStreamBeginCapture(npuStream_t stream, int device) {
  if (stream == 0) {
    return npuErrorStreamCaptureInvalidated;
  }
  npuError_t status = npuSuccess;
  npuError_t err = on_stream(device, stream, [&](DeviceState& d) {
    if (d.capture_stream >= 0) {
      status = npuErrorStreamCaptureInvalidated;
      return;
    }
    d.capture_stream = stream;
    d.captured = 0;
  });
  return err != npuSuccess ? err : status;
}

npuError_t npuStreamEndCapture(npuStream_t stream, int device, int64_t* launches) {
  npuError_t status = npuSuccess;
  npuError_t err = on_stream(device, stream, [&](DeviceState& d) {
    if (d.capture_stream != stream) {
      status = npuErrorStreamCaptureInvalidated;
      return;
    }
    d.capture_stream = -1;
    *launches = d.captured;
    d.captured = 0;
  });
  return err != npuSuccess ? err : status;
}

npuError_t npuStreamCaptureStatus(npuStream_t* stream, int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  *stream = d.capture_stream;
  return npuSuccess;
}

npuError_t npuGraphLaunchBegin(int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.capture_stream >= 0) {
      return npuErrorStreamCaptureUnsupported;
    }
  }
  auto host = host_issue(cost_model().host_launch_us);
  graph_launch_depth += 1;
  if (subscriber_count.load(std::memory_order_relaxed) > 0) {
    npuStream_t stream = 0;
    npuGetCurrentStream(&stream, device);
    notify(npuActivity{npuActivityGraph, "npuGraphLaunch", device, stream, 0.0, 0, 0, host.first, host.second,
                       host.first, host.second, npuHostTimeNs()});
  }
  return npuSuccess;
}

npuError_t npuGraphLaunchEnd(int device) {
  if (!valid_device(device)) {
    return npuErrorInvalidDevice;
  }
  if (graph_launch_depth == 0) {
    return npuErrorInvalidValue;
  }
  graph_launch_depth -= 1;
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
  // The device reaches the event once the host has issued it and the stream's earlier work is done.
  const double host = npuHostTime();
  return on_stream(device, stream, [&](DeviceState& d) {
    if (d.capture_stream >= 0) {
      return;  // recorded into the graph (graphs here keep no events)
    }
    event->recorded = true;
    event->device = device;
    event->time_us = std::max(d.stream_time[stream], host);
    d.stream_time[stream] = event->time_us + cost;
  });
}

npuError_t npuEventSynchronize(npuEvent_t event) {
  if (event == nullptr) {
    return npuErrorInvalidResourceHandle;
  }
  if (!event->recorded) {
    return npuSuccess;
  }
  if (valid_device(event->device)) {
    DeviceState& d = device_state(event->device);
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.capture_stream >= 0) {
      return npuErrorStreamCaptureUnsupported;
    }
  }
  notify_sync("npuEventSynchronize", event->device, 0, host_wait(event->time_us));
  return npuSuccess;
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
