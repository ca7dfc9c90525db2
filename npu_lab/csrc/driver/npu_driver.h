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
// Kernels run at once on the host, but the simulation keeps two kinds of time
// lines, as a real trace shows them: the *host's* (the CPU thread issuing
// work) and each device stream's. Issuing a kernel or a copy costs the host
// host_launch_us; the device cannot start it before the host issued it, nor
// before the stream's previous work ended; the host waits only at
// synchronization points (synchronize, blocking copies, .item()). A kernel
// takes what the cost model (npuDeviceProp) says on the unit it runs on:
//
//     time = launch latency + max(FLOPs / unit peak FLOP/s, bytes moved / bandwidth)
//
// where the unit is the vector unit (peak_gflops) or, for matrix products,
// the matrix unit, whose peak depends on the operands' precision.
// Everything is simulated time: it never depends on how busy the machine is.
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
  npuErrorStreamCaptureUnsupported = 7,  // a synchronizing call while the device is capturing a graph
  npuErrorStreamCaptureInvalidated = 8,  // capture on the default stream, or ended twice
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
  double peak_gflops = 2000.0;     // vector unit arithmetic throughput, GFLOP/s
  double matrix_gflops = 0.0;      // matrix unit, 32-bit operands, GFLOP/s (0: matrix products use the vector unit)
  double matrix16_gflops = 0.0;    // matrix unit, 16-bit operands (float16, bfloat16), GFLOP/s (0: as 32-bit)
  double bandwidth_gbs = 400.0;    // device memory bandwidth, GB/s
  double launch_us = 4.0;          // fixed cost of one kernel launch, us
  double link_gbs = 16.0;          // host <-> device link (PCIe-like), GB/s
  double link_latency_us = 8.0;    // fixed cost of one host <-> device copy, us
  double peer_gbs = 64.0;          // device <-> device link, GB/s
  double peer_latency_us = 5.0;    // fixed cost of one peer copy, us
  double event_us = 0.5;           // recording an event is a command on its stream too, us
  double host_launch_us = 0.0;     // host time to issue one kernel or copy (dispatch + driver), us
  double host_memcpy_gbs = 0.0;    // host memcpy into/out of the pinned staging buffer that a copy from
                                   // pageable memory needs, GB/s (0: staging costs nothing)
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

// How a host<->device copy treats host memory: pinned memory needs no staging copy, and a copy
// that is both pinned and asynchronous lets the host go on at once (it runs on the copy engine of
// its direction, so it overlaps kernels on other streams).
enum npuCopyFlags : unsigned { npuCopyPageable = 0, npuCopyPinned = 1, npuCopyAsync = 2 };

// Account one copy of `bytes` on `device`'s current stream (statistics and simulated time).
// The bytes themselves are moved by the caller (a host memcpy or a strided copy kernel).
// For npuMemcpyPeer, `peer` is the other device; both devices count the traffic. `name` labels the
// copy for profilers (default: "memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memcpy PtoP").
npuError_t npuAccountCopy(npuMemcpyKind kind, size_t bytes, int device, int peer = -1, const char* name = nullptr,
                          unsigned flags = npuCopyPageable);
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
// Every stream of the device catches up with the latest one, and the host waits for it.
npuError_t npuDeviceSynchronize(int device);
// The host waits until the stream's work is done.
npuError_t npuStreamSynchronize(npuStream_t stream, int device);
// The host's simulated time line (one per process: the thread that issues work and the autograd
// threads share it), in microseconds.
double npuHostTime();
// Later host work starts no earlier than `time_us` (collectives use it to line ranks up).
void npuHostWaitUntil(double time_us);
// Launches and copies accounted on a device so far.
npuError_t npuGetLaunchCounts(int64_t* launches, int64_t* copies, int device);

// Which unit a kernel's arithmetic runs on: the vector unit, or the matrix unit at a precision.
enum npuUnit { npuUnitVector = 0, npuUnitMatrix32 = 32, npuUnitMatrix16 = 16 };

// A kernel launch on `device`'s current stream: the host pays host_launch_us, the stream's clock
// advances by the cost model's time on `unit`.
npuError_t npuLaunchKernel(const char* name, double flops, int64_t bytes_read, int64_t bytes_written, int device,
                           npuUnit unit = npuUnitVector);

// -- reduced precision and unaccounted work ----------------------------------------------------------
// The simulator computes float16/bfloat16 operators in float32 (its kernels have no 16-bit
// arithmetic). On a chip with 16-bit units (matrix16_gflops > 0) that is an artefact, not the chip:
// between npuLowPrecisionBegin and npuLowPrecisionEnd (on this thread) matrix products are costed
// as 16-bit and each kernel's bytes are scaled by `byte_scale` (the 16-bit operands' share).
// `native` says whether the chip has 16-bit units (if not, nothing changes: the conversions are
// real work on such a chip).
npuError_t npuLowPrecisionBegin(double byte_scale, bool* native);
npuError_t npuLowPrecisionEnd();
// While paused (on this thread), launches and copies are not accounted at all: no time, no
// statistics, no trace. For the simulator's own bookkeeping copies (the float32 conversions above on
// a 16-bit chip, a graph replay writing into its static outputs).
void npuAccountingPause(bool pause);
bool npuAccountingPaused();

// -- graph capture and replay ----------------------------------------------------------------------
// While a device captures, the work launched on it is recorded, not run on the clock (the caller
// keeps what it needs to replay it), and synchronizing calls fail with
// npuErrorStreamCaptureUnsupported. Capture must be on a non-default stream.
npuError_t npuStreamBeginCapture(npuStream_t stream, int device);
// Ends the capture; `launches` is how many kernels and copies were captured.
npuError_t npuStreamEndCapture(npuStream_t stream, int device, int64_t* launches);
// The stream the device captures on, or -1.
npuError_t npuStreamCaptureStatus(npuStream_t* stream, int device);
// Replaying a graph: the host pays one host_launch_us for the whole graph (npuGraphLaunchBegin),
// then the launches between npuGraphLaunchBegin and npuGraphLaunchEnd cost the host nothing.
npuError_t npuGraphLaunchBegin(int device);
npuError_t npuGraphLaunchEnd(int device);

struct npuEvent;
using npuEvent_t = npuEvent*;
npuError_t npuEventCreate(npuEvent_t* event, bool timing);
npuError_t npuEventDestroy(npuEvent_t event);
// The event marks where the stream's clock stands; recording it then takes event_us of the stream's time.
npuError_t npuEventRecord(npuEvent_t event, npuStream_t stream, int device);
npuError_t npuStreamWaitEvent(npuStream_t stream, int device, npuEvent_t event);
// npuSuccess: the event was recorded (the simulator finishes work as it is launched).
npuError_t npuEventQuery(npuEvent_t event);
// The host waits until the device reached the event.
npuError_t npuEventSynchronize(npuEvent_t event);
npuError_t npuEventElapsedTime(double* ms, npuEvent_t start, npuEvent_t end);
// Simulated time at which the event was recorded, its device and id (ids are unique and never reused).
npuError_t npuEventInfo(npuEvent_t event, double* time_us, int* device, int64_t* id, bool* recorded, bool* timing);

// -- activity tracing (for profilers) ----------------------------------------------------------
enum npuActivityKind { npuActivityKernel = 0, npuActivityMemcpy = 1, npuActivitySync = 2, npuActivityGraph = 3 };
struct npuActivity {
  npuActivityKind kind;
  const char* name;
  int device;
  npuStream_t stream;
  double flops;
  int64_t bytes_read, bytes_written;
  double start_us, end_us;  // simulated device time (for a sync: when the host waited, on its time line)
  double host_start_us, host_end_us;  // simulated host time spent issuing it (or waiting, for a sync)
  int64_t host_ns;          // host wall clock (c10::getTime-compatible) when it was launched
};
using npuActivityCallback = std::function<void(const npuActivity&)>;
// Subscribers see every kernel launch, copy, host wait and graph launch. Returns a handle for npuUnsubscribe.
int npuSubscribe(npuActivityCallback callback);
void npuUnsubscribe(int handle);

// Host wall clock in nanoseconds since the epoch (CLOCK_REALTIME, the clock c10::getTime() and the profiler use).
int64_t npuHostTimeNs();

}  // namespace npu
