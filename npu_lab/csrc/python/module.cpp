// npu_lab._C: the Python face of the native runtime.
//
// Python (npu_lab/device/*.py, torch.npu) calls these functions; everything
// else reaches the runtime through PyTorch itself (the allocator, guard,
// hooks and kernels registered in the other files). The NumPy bridge lets the
// numba kernels work on device memory in place: an array made here points at
// the tensor's bytes and keeps its storage alive for as long as it exists.
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "../driver/npu_driver.h"
#include "../runtime/NpuAllocator.h"
#include "../runtime/NpuException.h"
#include "../runtime/NpuGenerator.h"

namespace py = pybind11;

namespace npu::aten {
void register_sparse_coo_kernels(torch::Library& m);   // aten/NpuSparse.cpp
void register_sparse_csr_kernels(torch::Library& m);   // aten/NpuSparse.cpp
void register_quantize_kernels(torch::Library& m);     // aten/NpuQuantized.cpp
void register_quantized_kernels(torch::Library& m);    // aten/NpuQuantized.cpp
void register_empty_strided(bool on);                  // aten/NpuMinimal.cpp
bool empty_strided_registered();                       // aten/NpuMinimal.cpp
}  // namespace npu::aten

namespace npu::runtime {
extern std::atomic<bool> hide_devices_from_autograd;  // runtime/NpuGuard.cpp
}  // namespace npu::runtime

namespace npu::python {

std::vector<std::string> native_ops();              // aten/NpuMinimal.cpp
std::vector<std::string> autocast_policy(const std::string& policy);  // amp/NpuAutocast.cpp
void bind_profiler(py::module_& m);                 // profiler/NpuKineto.cpp

namespace {

// -- the NumPy bridge ------------------------------------------------------------------------------
int numpy_type(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return NPY_FLOAT32;
    case c10::ScalarType::Double: return NPY_FLOAT64;
    case c10::ScalarType::Half: return NPY_FLOAT16;
    case c10::ScalarType::Long: return NPY_INT64;
    case c10::ScalarType::Int: return NPY_INT32;
    case c10::ScalarType::Short: return NPY_INT16;
    case c10::ScalarType::Char: return NPY_INT8;
    case c10::ScalarType::Byte: return NPY_UINT8;
    case c10::ScalarType::UInt16: return NPY_UINT16;
    case c10::ScalarType::UInt32: return NPY_UINT32;
    case c10::ScalarType::UInt64: return NPY_UINT64;
    case c10::ScalarType::Bool: return NPY_BOOL;
    case c10::ScalarType::ComplexFloat: return NPY_COMPLEX64;
    case c10::ScalarType::ComplexDouble: return NPY_COMPLEX128;
    default: return -1;
  }
}

void release_storage(PyObject* capsule) {
  delete static_cast<c10::Storage*>(PyCapsule_GetPointer(capsule, "npu_lab.storage"));
}

// An ndarray over `storage`'s bytes that keeps the storage alive (its base is a capsule owning a reference).
PyObject* array_over(const c10::Storage& storage, int npy_type, int ndim, npy_intp* dims, npy_intp* strides,
                     size_t byte_offset) {
  PyArray_Descr* descr = PyArray_DescrFromType(npy_type);
  if (descr == nullptr) {
    return nullptr;
  }
  char* data = static_cast<char*>(storage.mutable_data());
  if (data != nullptr) {
    data += byte_offset;
  }
  PyObject* arr = PyArray_NewFromDescr(&PyArray_Type, descr, ndim, dims, strides, data, NPY_ARRAY_WRITEABLE,
                                       nullptr);
  if (arr == nullptr) {
    return nullptr;
  }
  if (data != nullptr) {
    PyObject* capsule = PyCapsule_New(new c10::Storage(storage), "npu_lab.storage", &release_storage);
    if (capsule == nullptr || PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), capsule) < 0) {
      Py_DECREF(arr);
      return nullptr;
    }
    PyArray_UpdateFlags(reinterpret_cast<PyArrayObject*>(arr), NPY_ARRAY_ALIGNED);
  }
  return arr;
}

const at::Tensor* unpack(PyObject* obj, py::detail::make_caster<at::Tensor>& caster) {
  if (!caster.load(obj, false)) {
    PyErr_Format(PyExc_TypeError, "expected a torch.Tensor, got %s", Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return &static_cast<at::Tensor&>(caster);
}

int checked_type(const at::Tensor& t) {
  int type = numpy_type(t.scalar_type());
  if (type < 0) {
    PyErr_Format(PyExc_TypeError, "npu kernels cannot work on %s tensors: NumPy has no such type",
                 c10::toString(t.scalar_type()));
  }
  return type;
}

// as_array(t): t's elements as an ndarray with t's shape and strides (no copy).
PyObject* as_array(PyObject* /*self*/, PyObject* obj) {
  py::detail::make_caster<at::Tensor> caster;
  const at::Tensor* t = unpack(obj, caster);
  if (t == nullptr) {
    return nullptr;
  }
  int type = checked_type(*t);
  if (type < 0) {
    return nullptr;
  }
  const int64_t ndim = t->dim();
  const int64_t itemsize = static_cast<int64_t>(t->element_size());
  npy_intp dims[64], strides[64];
  auto sizes = t->sizes();
  auto st = t->strides();
  for (int64_t i = 0; i < ndim; ++i) {
    dims[i] = sizes[i];
    strides[i] = st[i] * itemsize;
  }
  return array_over(t->storage(), type, static_cast<int>(ndim), dims, strides,
                    static_cast<size_t>(t->storage_offset() * itemsize));
}

// flat_view(t): a contiguous t's elements as a 1-D ndarray (its numel elements, from its offset).
PyObject* flat_view(PyObject* /*self*/, PyObject* obj) {
  py::detail::make_caster<at::Tensor> caster;
  const at::Tensor* t = unpack(obj, caster);
  if (t == nullptr) {
    return nullptr;
  }
  int type = checked_type(*t);
  if (type < 0) {
    return nullptr;
  }
  if (!t->is_contiguous()) {
    PyErr_SetString(PyExc_ValueError, "flat_view needs a contiguous tensor");
    return nullptr;
  }
  const auto itemsize = static_cast<npy_intp>(t->element_size());
  npy_intp dims[1] = {static_cast<npy_intp>(t->numel())};
  npy_intp strides[1] = {itemsize};
  return array_over(t->storage(), type, 1, dims, strides, static_cast<size_t>(t->storage_offset() * itemsize));
}

// flat_array(t): the whole storage of t as a 1-D ndarray of t's dtype (strided kernels index into it).
PyObject* flat_array(PyObject* /*self*/, PyObject* obj) {
  py::detail::make_caster<at::Tensor> caster;
  const at::Tensor* t = unpack(obj, caster);
  if (t == nullptr) {
    return nullptr;
  }
  int type = checked_type(*t);
  if (type < 0) {
    return nullptr;
  }
  const auto itemsize = static_cast<npy_intp>(t->element_size());
  npy_intp dims[1] = {static_cast<npy_intp>(t->storage().nbytes()) / itemsize};
  npy_intp strides[1] = {itemsize};
  return array_over(t->storage(), type, 1, dims, strides, 0);
}

// block(t): the bytes of t's storage as a uint8 ndarray.
PyObject* block(PyObject* /*self*/, PyObject* obj) {
  py::detail::make_caster<at::Tensor> caster;
  const at::Tensor* t = unpack(obj, caster);
  if (t == nullptr) {
    return nullptr;
  }
  npy_intp dims[1] = {static_cast<npy_intp>(t->storage().nbytes())};
  npy_intp strides[1] = {1};
  return array_over(t->storage(), NPY_UINT8, 1, dims, strides, 0);
}

PyMethodDef bridge_methods[] = {
    {"as_array", as_array, METH_O, "as_array(t): an ndarray aliasing t's device memory, with t's shape and strides"},
    {"flat_array", flat_array, METH_O, "flat_array(t): t's whole storage as a 1-D ndarray of t's dtype"},
    {"flat_view", flat_view, METH_O, "flat_view(t): a contiguous t's elements as a 1-D ndarray"},
    {"block", block, METH_O, "block(t): t's storage as a uint8 ndarray"},
    {nullptr, nullptr, 0, nullptr}};

int device_or_current(int device) {
  if (device < 0) {
    NPU_CHECK(npuGetDevice(&device));
  }
  return device;
}

// A device buffer no tensor wraps (launch plans' intermediates), as a uint8 array that frees it when it dies.
py::object alloc_block(size_t nbytes, int device) {
  device = device_or_current(device);
  int current = 0;
  npuGetDevice(&current);
  NPU_CHECK(npuSetDevice(device));
  c10::DataPtr ptr;
  try {
    ptr = runtime::device_allocator()->allocate(nbytes);
  } catch (...) {
    npuSetDevice(current);
    throw;
  }
  npuSetDevice(current);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(ptr), runtime::device_allocator(),
                       /*resizable=*/false);
  npy_intp dims[1] = {static_cast<npy_intp>(nbytes)};
  npy_intp strides[1] = {1};
  PyObject* arr = array_over(storage, NPY_UINT8, 1, dims, strides, 0);
  if (arr == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(arr);
}

at::Tensor empty(std::vector<int64_t> sizes, at::ScalarType st, int device) {
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_or_current(device)));
  return at::detail::empty_generic(sizes, runtime::device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st, std::nullopt);
}

at::Tensor empty_strided(std::vector<int64_t> sizes, std::vector<int64_t> strides, at::ScalarType st, int device) {
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_or_current(device)));
  return at::detail::empty_strided_generic(sizes, strides, runtime::device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

py::dict counters(int device) {
  device = device_or_current(device);
  auto k = runtime::device_allocator()->counters(device);
  npuDeviceProp prop;
  NPU_CHECK(npuGetDeviceProperties(&prop, device));
  py::dict d;
  d["allocated"] = k.allocated;
  d["peak_allocated"] = k.peak_allocated;
  d["reserved"] = k.reserved;
  d["peak_reserved"] = k.peak_reserved;
  d["cached"] = k.cached;
  d["live_blocks"] = k.live_blocks;
  d["peak_live_blocks"] = k.peak_live_blocks;
  d["num_allocs"] = k.num_allocs;
  d["num_frees"] = k.num_frees;
  d["cache_hits"] = k.cache_hits;
  d["num_ooms"] = k.num_ooms;
  d["num_alloc_retries"] = k.num_alloc_retries;
  d["capacity"] = prop.total_memory;
  return d;
}

py::dict transfer_stats(int device) {
  npuTransferStats t;
  NPU_CHECK(npuGetTransferStats(&t, device_or_current(device)));
  py::dict d;
  d["host_to_device_bytes"] = t.host_to_device_bytes;
  d["host_to_device_copies"] = t.host_to_device_copies;
  d["device_to_host_bytes"] = t.device_to_host_bytes;
  d["device_to_host_copies"] = t.device_to_host_copies;
  d["device_to_device_bytes"] = t.device_to_device_bytes;
  d["device_to_device_copies"] = t.device_to_device_copies;
  d["peer_bytes"] = t.peer_bytes;
  d["peer_copies"] = t.peer_copies;
  return d;
}

// The cost model's figures, by the names Python uses (npu_lab.cost_model).
const std::pair<const char*, double npuDeviceProp::*> kCostFigures[] = {
    {"peak_gflops", &npuDeviceProp::peak_gflops},   {"bandwidth_gbs", &npuDeviceProp::bandwidth_gbs},
    {"launch_us", &npuDeviceProp::launch_us},       {"link_gbs", &npuDeviceProp::link_gbs},
    {"link_latency_us", &npuDeviceProp::link_latency_us}, {"peer_gbs", &npuDeviceProp::peer_gbs},
    {"peer_latency_us", &npuDeviceProp::peer_latency_us}, {"event_us", &npuDeviceProp::event_us},
    {"matrix_gflops", &npuDeviceProp::matrix_gflops}, {"matrix16_gflops", &npuDeviceProp::matrix16_gflops},
    {"host_launch_us", &npuDeviceProp::host_launch_us}, {"host_memcpy_gbs", &npuDeviceProp::host_memcpy_gbs},
};

py::dict get_cost_model() {
  npuDeviceProp p;
  NPU_CHECK(npuGetDeviceProperties(&p, 0));
  py::dict d;
  for (const auto& [name, figure] : kCostFigures) {
    d[name] = p.*figure;
  }
  return d;
}

void set_cost_model(const py::dict& d) {
  npuDeviceProp p;
  NPU_CHECK(npuGetDeviceProperties(&p, 0));
  for (const auto& [name, figure] : kCostFigures) {
    p.*figure = d[name].cast<double>();
  }
  npuError_t err = npuSetCostModel(p);
  TORCH_CHECK_VALUE(err == npuSuccess, "cost model figures must be positive (latencies may be zero)");
}

// Python subscribers to the driver's activities (kernels and copies), called with the GIL.
std::mutex listener_mutex;
int activity_handle = 0;
std::shared_ptr<py::object> activity_listener;

void set_activity_listener(py::object fn) {
  std::lock_guard<std::mutex> lock(listener_mutex);
  if (activity_handle != 0) {
    npuUnsubscribe(activity_handle);
    activity_handle = 0;
  }
  if (fn.is_none()) {
    py::gil_scoped_acquire gil;
    activity_listener.reset();
    return;
  }
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  activity_listener = holder;
  activity_handle = npuSubscribe([holder](const npuActivity& a) {
    py::gil_scoped_acquire gil;
    try {
      const char* kind = a.kind == npuActivityKernel   ? "kernel"
                         : a.kind == npuActivityMemcpy ? "copy"
                         : a.kind == npuActivitySync   ? "sync"
                                                       : "graph";
      (*holder)(kind, a.name, a.device, a.stream, a.flops, a.bytes_read, a.bytes_written, a.start_us, a.end_us,
                a.host_start_us, a.host_end_us);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("npu_lab activity listener");
    }
  });
}

std::shared_ptr<py::object> memory_listener;

void set_memory_listener(py::object fn) {
  if (fn.is_none()) {
    runtime::device_allocator()->setListener(nullptr);
    memory_listener.reset();
    return;
  }
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  memory_listener = holder;
  runtime::device_allocator()->setListener([holder](const char* kind, int device, int64_t bytes, int64_t allocated) {
    py::gil_scoped_acquire gil;
    try {
      (*holder)(kind, device, bytes, allocated);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("npu_lab memory listener");
    }
  });
}

py::tuple philox_reserve(py::object generator, int device, uint64_t blocks) {
  at::Generator gen = generator.is_none() ? runtime::default_generator(static_cast<c10::DeviceIndex>(device_or_current(device)))
                                          : generator.cast<at::Generator>();
  TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'npu' device type for generator but found '", gen.device().type(), "'");
  auto* impl = gen.get<runtime::NpuGeneratorImpl>();
  std::lock_guard<std::mutex> lock(impl->mutex_);
  auto [seed, offset] = impl->reserve(blocks);
  return py::make_tuple(seed, offset);
}

py::tuple event_info(int64_t event_id) {
  double t = 0;
  int device = -1;
  int64_t id = 0;
  bool recorded = false, timing = false;
  NPU_CHECK(npuEventInfo(reinterpret_cast<npuEvent_t>(event_id), &t, &device, &id, &recorded, &timing));
  return py::make_tuple(t, device, id, recorded, timing);
}

}  // namespace

}  // namespace npu::python

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace npu;
  using namespace npu::python;
  if (_import_array() < 0) {
    throw py::error_already_set();
  }
  m.doc() = "npu-lab's native runtime: the simulated NPU driver and its PyTorch PrivateUse1 runtime";
  for (PyMethodDef* def = bridge_methods; def->ml_name != nullptr; ++def) {
    PyObject* fn = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
    if (fn == nullptr) {
      throw py::error_already_set();
    }
    m.add_object(def->ml_name, py::reinterpret_steal<py::object>(fn));
  }

  // devices
  m.def("device_count", [] { int n = 0; npuGetDeviceCount(&n); return n; });
  m.def("hide_devices_from_autograd", [](bool hide) { ::npu::runtime::hide_devices_from_autograd.store(hide); });
  m.def("current_device", [] { int d = 0; npuGetDevice(&d); return d; });
  m.def("set_device", [](int d) {
    int n = 0;
    npuGetDeviceCount(&n);
    TORCH_CHECK(d >= 0 && d < n, "The device index is out of range. It must be in [0, ", n, "), but got ", d,
                " (the simulated NPU has ", n, " devices: NPU_LAB_DEVICES sets how many)");
    NPU_CHECK(npuSetDevice(d));
  });
  m.def("exchange_device", [](int d) {
    int old = 0;
    npuGetDevice(&old);
    if (d >= 0 && d != old) {
      NPU_CHECK(npuSetDevice(d));
    }
    return old;
  });
  m.def("init", [] {
    npuError_t err = npuInit();
    TORCH_CHECK(err != npuErrorInitializationError,
                "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, "
                "you must use the 'spawn' start method");
    NPU_CHECK(err);
  });
  m.def("is_initialized", &npuIsInitialized);
  m.def("is_in_bad_fork", &npuIsInBadFork);

  // memory
  m.def("memory_counters", &counters, py::arg("device") = -1);
  m.def("transfer_stats", &transfer_stats, py::arg("device") = -1);
  m.def("reset_peak", [](int d) { runtime::device_allocator()->resetPeakStats(device_or_current(d)); });
  m.def("reset_accumulated", [](int d) { runtime::device_allocator()->resetAccumulatedStats(device_or_current(d)); });
  m.def("empty_cache", [](int d) { runtime::device_allocator()->emptyCache(device_or_current(d)); });
  m.def("set_capacity", [](int d, size_t n) { runtime::device_allocator()->setCapacity(device_or_current(d), n); });
  m.def("mem_get_info", [](int d) { return runtime::device_allocator()->getMemoryInfo(device_or_current(d)); });
  m.def("set_memory_listener", &set_memory_listener);
  m.def("memcheck_enable", &runtime::memcheck_enable);
  m.def("memcheck_enabled", &runtime::memcheck_enabled);
  m.def("memcheck_scan", &runtime::memcheck_scan);
  m.def("memcheck_report", &runtime::memcheck_report);
  m.def("memcheck_reset", &runtime::memcheck_reset);
  m.def("alloc_block", &alloc_block, py::arg("nbytes"), py::arg("device") = -1);
  m.def("pointer_attributes", [](uintptr_t ptr) {
    npuPointerAttributes a;
    npuPointerGetAttributes(&a, reinterpret_cast<void*>(ptr));
    const char* type = a.type == npuMemoryTypeDevice ? "device" : a.type == npuMemoryTypeHost ? "pinned" : "unregistered";
    return py::make_tuple(type, a.device, reinterpret_cast<uintptr_t>(a.base), a.size);
  });
  m.def("account_copy", [](const std::string& kind, size_t bytes, int device, int peer, bool pinned,
                           bool non_blocking) {
    npuMemcpyKind k = kind == "h2d" ? npuMemcpyHostToDevice
                      : kind == "d2h" ? npuMemcpyDeviceToHost
                      : kind == "d2d" ? npuMemcpyDeviceToDevice
                                      : npuMemcpyPeer;
    unsigned flags = (pinned ? npuCopyPinned : npuCopyPageable) | (non_blocking ? npuCopyAsync : 0u);
    NPU_CHECK(npuAccountCopy(k, bytes, device_or_current(device), peer, nullptr, flags));
  }, py::arg("kind"), py::arg("bytes"), py::arg("device") = -1, py::arg("peer") = -1, py::arg("pinned") = false,
     py::arg("non_blocking") = false);

  // overlap checks (ATen's, as TensorIterator applies them to a written tensor and its inputs)
  m.def("assert_no_internal_overlap", [](const at::Tensor& t) { at::assert_no_internal_overlap(t); });
  m.def("assert_no_partial_overlap", [](const at::Tensor& a, const at::Tensor& b) { at::assert_no_partial_overlap(a, b); });

  // tensors
  m.def("empty", &empty, py::arg("size"), py::arg("dtype"), py::arg("device") = -1);
  m.def("empty_strided", &empty_strided, py::arg("size"), py::arg("stride"), py::arg("dtype"),
        py::arg("device") = -1);

  // the simulated clock, streams and events
  m.def("launch", [](const char* name, double flops, int64_t read, int64_t written, int device, int matrix) {
    TORCH_CHECK_VALUE(matrix == 0 || matrix == 16 || matrix == 32,
                      "launch(..., matrix=): 0 (the vector unit), 16 or 32 (the matrix unit at that precision), not ",
                      matrix);
    NPU_CHECK(npuLaunchKernel(name, flops, read, written, device_or_current(device), static_cast<npuUnit>(matrix)));
  }, py::arg("name"), py::arg("flops"), py::arg("bytes_read"), py::arg("bytes_written"), py::arg("device") = -1,
     py::arg("matrix") = 0);
  m.def("host_time", &npuHostTime);
  m.def("low_precision_begin", [](double byte_scale) {
    bool native = false;
    NPU_CHECK(npuLowPrecisionBegin(byte_scale, &native));
    return native;
  });
  m.def("low_precision_end", [] { NPU_CHECK(npuLowPrecisionEnd()); });
  m.def("accounting_pause", &npuAccountingPause);
  m.def("accounting_paused", &npuAccountingPaused);
  m.def("host_wait_until", &npuHostWaitUntil);
  m.def("stream_synchronize", [](int device, int64_t stream) {
    NPU_CHECK(npuStreamSynchronize(stream, device_or_current(device)));
  });
  m.def("begin_capture", [](int device, int64_t stream) {
    NPU_CHECK(npuStreamBeginCapture(stream, device_or_current(device)));
  });
  m.def("end_capture", [](int device, int64_t stream) {
    int64_t n = 0;
    NPU_CHECK(npuStreamEndCapture(stream, device_or_current(device), &n));
    return n;
  });
  m.def("capture_stream", [](int device) {
    npuStream_t s = -1;
    NPU_CHECK(npuStreamCaptureStatus(&s, device_or_current(device)));
    return s;
  });
  m.def("graph_launch_begin", [](int device) { NPU_CHECK(npuGraphLaunchBegin(device_or_current(device))); });
  m.def("graph_launch_end", [](int device) { NPU_CHECK(npuGraphLaunchEnd(device_or_current(device))); });
  m.def("stream_time", [](int device, int64_t stream) {
    double t = 0;
    NPU_CHECK(npuStreamTime(&t, stream, device_or_current(device)));
    return t;
  });
  m.def("stream_wait_until", [](int device, int64_t stream, double t) {
    NPU_CHECK(npuStreamWaitUntil(stream, device_or_current(device), t));
  });
  m.def("synchronize", [](int device) { NPU_CHECK(npuDeviceSynchronize(device_or_current(device))); });
  m.def("launch_counts", [](int device) {
    int64_t launches = 0, copies = 0;
    NPU_CHECK(npuGetLaunchCounts(&launches, &copies, device_or_current(device)));
    return py::make_tuple(launches, copies);
  });
  m.def("current_stream", [](int device) {
    npuStream_t s = 0;
    NPU_CHECK(npuGetCurrentStream(&s, device_or_current(device)));
    return s;
  });
  m.def("set_current_stream", [](int device, int64_t s) { NPU_CHECK(npuSetCurrentStream(s, device_or_current(device))); });
  m.def("event_info", &event_info);
  m.def("event_elapsed_time", [](int64_t start, int64_t end) {
    TORCH_CHECK(start != 0 && end != 0, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    npuError_t err = npuEventElapsedTime(&ms, reinterpret_cast<npuEvent_t>(start), reinterpret_cast<npuEvent_t>(end));
    TORCH_CHECK(err != npuErrorNotReady, "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(err != npuErrorInvalidResourceHandle, "Both events must be created with argument 'enable_timing=True'.");
    NPU_CHECK(err);
    return ms;
  });
  m.def("set_activity_listener", &set_activity_listener);
  m.def("get_cost_model", &get_cost_model);
  m.def("set_cost_model", &set_cost_model);

  // backend metadata (runtime/NpuSerialization.cpp): torch 2.13 has no torch._C._copy_backend_meta yet
  m.def("copy_backend_meta", [](const at::Tensor& src, const at::Tensor& dst) {
    dst.unsafeGetTensorImpl()->set_backend_meta(src.unsafeGetTensorImpl()->get_backend_meta_intrusive_ptr());
  });

  // random numbers
  m.def("philox_reserve", &philox_reserve, py::arg("generator"), py::arg("device"), py::arg("blocks"));
  m.def("default_generator", [](int device) {
    return runtime::default_generator(static_cast<c10::DeviceIndex>(device_or_current(device)));
  });

  // what the C++ side registers
  m.def("native_ops", &native_ops);
  // the runtime's empty_strided, withheld for a while by the bring-up clinic (bringup.clinic.withheld)
  m.def("register_empty_strided", &::npu::aten::register_empty_strided, py::arg("on"));
  m.def("empty_strided_registered", &::npu::aten::empty_strided_registered);
  // The C++ compute kernels (sparse and quantized tensors). A bare device (NPU_LAB_BARE=1) never calls this:
  // it keeps only the runtime's own operators (native_ops). Idempotent; the registrations live until exit.
  m.def("register_compute_kernels", []() {
    static std::once_flag once;
    std::call_once(once, []() {
      using torch::Library;
      auto add = [](c10::DispatchKey key, void (*fn)(Library&)) {
        auto* lib = new Library(Library::IMPL, "aten", key, __FILE__, __LINE__);  // never freed: as static ones
        fn(*lib);
      };
      add(c10::DispatchKey::SparsePrivateUse1, &::npu::aten::register_sparse_coo_kernels);
      add(c10::DispatchKey::SparseCsrPrivateUse1, &::npu::aten::register_sparse_csr_kernels);
      add(c10::DispatchKey::PrivateUse1, &::npu::aten::register_quantize_kernels);
      add(c10::DispatchKey::QuantizedPrivateUse1, &::npu::aten::register_quantized_kernels);
    });
  });
  m.def("autocast_policy", &autocast_policy);
  bind_profiler(m);
}
