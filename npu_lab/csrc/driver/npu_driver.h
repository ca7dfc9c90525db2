// The simulated NPU driver: what libcudart is to CUDA.
//
// This layer knows nothing about PyTorch. It owns the devices: how many there
// are, which one the calling thread uses, their memory (host memory stands in
// for device memory, with a capacity per device), copies between host and
// devices, and each device's streams, events and simulated clock.
//
// Every call returns an npuError_t, as a C driver API does; the PyTorch
// runtime above it (../runtime) turns errors into PyTorch exceptions.
//
// Kernels run at once on the host, but the device keeps its own time: a
// launch advances the clock of the stream it runs on by what the cost model
// (npuDeviceProp) says it would take on the simulated chip:
//
//     time = launch latency + max(FLOPs / peak FLOP/s, bytes moved / bandwidth)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace npu {

enum npuError_t {
  npuSuccess = 0,
  npuErrorInvalidValue = 1,
  npuErrorMemoryAllocation = 2,
  npuErrorInvalidDevice = 3,
  npuErrorInvalidResourceHandle = 4,
  npuErrorNotReady = 5,
  npuErrorInitializationError = 6,
};

const char* npuGetErrorString(npuError_t error);

// -- devices ------------------------------------------------------------------------------------
// The number of devices is read once, from NPU_LAB_DEVICES (default 2, at most 16).
npuError_t npuGetDeviceCount(int* count);
// The current device is per thread, as in CUDA (default 0).
npuError_t npuGetDevice(int* device);
npuError_t npuSetDevice(int device);
// Initialise the driver (idempotent). After a fork(), the child may not initialise it again.
npuError_t npuInit();
bool npuIsInitialized();
bool npuIsInBadFork();

// The device's specification: its capacity and the roofline cost model of the simulated chip.
struct npuDeviceProp {
  std::string name = "npu-lab simulated NPU";
  size_t total_memory = size_t(4) << 30;
  double peak_gflops = 2000.0;     // arithmetic throughput, GFLOP/s
  double bandwidth_gbs = 400.0;    // device memory bandwidth, GB/s
  double launch_us = 4.0;          // fixed cost of one kernel launch, us
  double link_gbs = 16.0;          // host <-> device link (PCIe-like), GB/s
  double link_latency_us = 8.0;    // fixed cost of one host <-> device copy, us
  double peer_gbs = 64.0;          // device <-> device link, GB/s
  double peer_latency_us = 5.0;    // fixed cost of one peer copy, us
  double event_us = 0.5;           // recording an event is a command on its stream too, us
};
npuError_t npuGetDeviceProperties(npuDeviceProp* prop, int device);
// Changes the cost model of every device (capacity excepted: see npuDeviceSetCapacity).
npuError_t npuSetCostModel(const npuDeviceProp& prop);
npuError_t npuDeviceSetCapacity(int device, size_t bytes);

// -- memory ------------------------------------------------------------------------------------
// Device memory of the current device. Fails with npuErrorMemoryAllocation past the capacity.
npuError_t npuMalloc(void** ptr, size_t size);
npuError_t npuFree(void* ptr);
// Page-locked ("pinned") host memory: host memory the device can copy from asynchronously.
npuError_t npuMallocHost(void** ptr, size_t size);
npuError_t npuFreeHost(void* ptr);
// Free and total bytes of the current device.
npuError_t npuMemGetInfo(size_t* free, size_t* total);

enum npuMemoryType { npuMemoryTypeUnregistered = 0, npuMemoryTypeHost = 1, npuMemoryTypeDevice = 2 };
struct npuPointerAttributes {
  npuMemoryType type = npuMemoryTypeUnregistered;
  int device = -1;
  void* base = nullptr;  // start of the allocation the pointer lies in
  size_t size = 0;       // its size
};
// Where a pointer lives: any address inside a device or pinned allocation is recognised.
npuError_t npuPointerGetAttributes(npuPointerAttributes* attr, const void* ptr);

enum npuMemcpyKind {
  npuMemcpyHostToDevice = 1,
  npuMemcpyDeviceToHost = 2,
  npuMemcpyDeviceToDevice = 3,  // within one device
  npuMemcpyPeer = 4,            // between two devices
};

// Bytes and copies that crossed between host and device, within a device, or between devices.
struct npuTransferStats {
  int64_t host_to_device_bytes = 0, host_to_device_copies = 0;
  int64_t device_to_host_bytes = 0, device_to_host_copies = 0;
  int64_t device_to_device_bytes = 0, device_to_device_copies = 0;
  int64_t peer_bytes = 0, peer_copies = 0;
};
npuError_t npuGetTransferStats(npuTransferStats* stats, int device);

// Account one copy of `bytes` on `device`'s current stream (statistics and simulated time).
// The bytes themselves are moved by the caller (a host memcpy or a strided copy kernel).
// For npuMemcpyPeer, `peer` is the other device; both devices count the traffic. `name` labels the
// copy for profilers (default: "memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memcpy PtoP").
npuError_t npuAccountCopy(npuMemcpyKind kind, size_t bytes, int device, int peer = -1, const char* name = nullptr);
// memcpy between host and device memory (or within/between devices), accounted as above.
npuError_t npuMemcpy(void* dst, const void* src, size_t bytes, npuMemcpyKind kind);

// -- streams, events and the simulated clock ---------------------------------------------------
using npuStream_t = int64_t;  // 0 is the default stream of a device
npuError_t npuStreamCreate(npuStream_t* stream, int device);
// The current stream is per thread and per device, as in CUDA.
npuError_t npuGetCurrentStream(npuStream_t* stream, int device);
npuError_t npuSetCurrentStream(npuStream_t stream, int device);
// Where a stream's clock stands, in simulated microseconds.
npuError_t npuStreamTime(double* time_us, npuStream_t stream, int device);
// Later work on `stream` starts no earlier than `time_us`.
npuError_t npuStreamWaitUntil(npuStream_t stream, int device, double time_us);
// Every stream of the device catches up with the latest one.
npuError_t npuDeviceSynchronize(int device);
// Launches and copies accounted on a device so far.
npuError_t npuGetLaunchCounts(int64_t* launches, int64_t* copies, int device);

// A kernel launch on `device`'s current stream: advances its clock by the cost model's time.
npuError_t npuLaunchKernel(const char* name, double flops, int64_t bytes_read, int64_t bytes_written, int device);

struct npuEvent;
using npuEvent_t = npuEvent*;
npuError_t npuEventCreate(npuEvent_t* event, bool timing);
npuError_t npuEventDestroy(npuEvent_t event);
// The event marks where the stream's clock stands; recording it then takes event_us of the stream's time.
npuError_t npuEventRecord(npuEvent_t event, npuStream_t stream, int device);
npuError_t npuStreamWaitEvent(npuStream_t stream, int device, npuEvent_t event);
// npuSuccess: the event was recorded (the simulator finishes work as it is launched).
npuError_t npuEventQuery(npuEvent_t event);
npuError_t npuEventElapsedTime(double* ms, npuEvent_t start, npuEvent_t end);
// Simulated time at which the event was recorded, its device and id (ids are unique and never reused).
npuError_t npuEventInfo(npuEvent_t event, double* time_us, int* device, int64_t* id, bool* recorded, bool* timing);

// -- activity tracing (for profilers) ----------------------------------------------------------
enum npuActivityKind { npuActivityKernel = 0, npuActivityMemcpy = 1 };
struct npuActivity {
  npuActivityKind kind;
  const char* name;
  int device;
  npuStream_t stream;
  double flops;
  int64_t bytes_read, bytes_written;
  double start_us, end_us;  // simulated device time
  int64_t host_ns;          // host wall clock (c10::getTime-compatible) when it was launched
};
using npuActivityCallback = std::function<void(const npuActivity&)>;
// Subscribers see every kernel launch and copy. Returns a handle for npuUnsubscribe.
int npuSubscribe(npuActivityCallback callback);
void npuUnsubscribe(int handle);

// Host wall clock in nanoseconds since the epoch (CLOCK_REALTIME, the clock c10::getTime() and the profiler use).
int64_t npuHostTimeNs();

}  // namespace npu
