// The operators every device must have, registered from C++ on PrivateUse1.
//
// Memory (empty, empty_strided, resize_, set_), views (as_strided, view and
// friends: geometry only, on the same storage), copies across the host/device
// boundary, reading one element back (.item()), and the shallow-copy rule that
// lets `param.data = tensor` and `module.to("npu")` keep Parameters' identity.
// Everything else (arithmetic, reductions, matmul...) is a numba kernel
// registered from Python with torch.library (npu_lab/ops).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../runtime/NpuAllocator.h"
#include "../runtime/NpuException.h"

namespace npu::aten {

namespace {

constexpr c10::DispatchKeySet kNpuKeys(c10::DispatchKey::PrivateUse1);

void check_layout_and_pinning(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "npu tensors are strided; layout ", c10::layout_or_default(layout), " is not supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_layout_and_pinning(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, runtime::device_allocator(), kNpuKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_layout_and_pinning(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, runtime::device_allocator(), kNpuKeys,
                                           c10::dtype_or_default(dtype));
}

// -- views: the CPU's geometry code, on npu storages (it checks that the view fits its storage) --------
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor view_dtype(const at::Tensor& self, c10::ScalarType dtype) {
  return at::native::view_dtype(self, dtype);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor view_as_complex(const at::Tensor& self) {
  return at::native::view_as_complex(self);
}

// -- storage: resize_ and set_ ---------------------------------------------------------------------------
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, format);
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  const c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const c10::DeviceGuard guard(self.device());
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, runtime::device_allocator(), /*resizable=*/true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

// -- copies --------------------------------------------------------------------------------------------
// Device memory is host memory, so a device tensor can be seen as a CPU tensor over the same bytes:
// the CPU's copy kernel then does every strided, broadcasting and dtype-converting copy. What makes
// the copy a *device* copy is npuAccountCopy: its bytes and its time on the device's clock.
at::Tensor host_alias(const at::Tensor& t) {
  at::Tensor alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
  if (t.is_conj()) {
    alias._set_conj(true);
  }
  if (t.is_neg()) {
    alias._set_neg(true);
  }
  return alias;
}

size_t bytes_of(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// How a copy treats its CPU tensor: pinned memory (torch.Tensor.pin_memory()) needs no staging, and
// with non_blocking=True the host does not wait for it.
unsigned host_copy_flags(const at::Tensor& cpu, bool non_blocking) {
  npuPointerAttributes attr{};
  npuPointerGetAttributes(&attr, cpu.data_ptr());
  unsigned flags = attr.type == npuMemoryTypeHost ? npuCopyPinned : npuCopyPageable;
  return non_blocking ? flags | npuCopyAsync : flags;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy between undefined tensors");
  const bool src_npu = self.device().is_privateuseone();
  const bool dst_npu = dst.device().is_privateuseone();
  TORCH_CHECK(src_npu || self.device().is_cpu(), "npu cannot copy from ", self.device());
  TORCH_CHECK(dst_npu || dst.device().is_cpu(), "npu cannot copy to ", dst.device());
  if (dst.numel() == 0) {
    return dst;
  }
  if (src_npu && dst_npu) {
    // The host aliases below are separate storages, so ATen's own overlap check cannot see that two
    // npu views share bytes: make it on the npu tensors (a[1:].copy_(a[:-1]) is refused, as on the CPU).
    at::assert_no_partial_overlap(dst, self);
    const c10::DeviceGuard guard(dst.device());
    at::Tensor out = host_alias(dst);
    at::native::copy_(out, host_alias(self), non_blocking);
    if (self.device() == dst.device()) {
      NPU_CHECK(npuAccountCopy(npuMemcpyDeviceToDevice, bytes_of(dst), dst.device().index()));
    } else {
      NPU_CHECK(npuAccountCopy(npuMemcpyPeer, bytes_of(dst), dst.device().index(), self.device().index()));
    }
  } else if (dst_npu) {
    const c10::DeviceGuard guard(dst.device());
    at::Tensor out = host_alias(dst);
    at::native::copy_(out, self, non_blocking);
    NPU_CHECK(npuAccountCopy(npuMemcpyHostToDevice, bytes_of(dst), dst.device().index(), -1, nullptr,
                             host_copy_flags(self, non_blocking)));
  } else {
    const c10::DeviceGuard guard(self.device());
    at::Tensor out = dst;
    at::native::copy_(out, host_alias(self), non_blocking);
    NPU_CHECK(npuAccountCopy(npuMemcpyDeviceToHost, bytes_of(self), self.device().index(), -1, nullptr,
                             host_copy_flags(dst, non_blocking)));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.device().is_privateuseone()) {
    resize_(dst, self.sizes(), std::nullopt);
  } else {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  return copy_from(self, dst, false);
}

// tensor.item(): a synchronising device-to-host read of one element.
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Scalar value = at::native::_local_scalar_dense_cpu(host_alias(self));
  NPU_CHECK(npuAccountCopy(npuMemcpyDeviceToHost, self.element_size(), self.device().index(), -1,
                           "memcpy DtoH (item)"));
  return value;
}

// PyTorch lets `a.data = b` swap a tensor's contents only between "compatible" tensor types: dense
// CPU, CUDA, XPU... tensors are, but torch 2.13 does not list PrivateUse1 (newer releases ask the
// backend's hooks). A dense npu tensor holds the same TensorImpl as a dense CPU one, so say so: then
// `param.data = t` works, and `module.to("npu")` keeps Parameters (and tied weights) as they are.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) {
    return true;
  }
  auto dense_cpu_or_npu = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided && !t.is_quantized() &&
           (t.device().is_cpu() || t.device().is_privateuseone()) && !t.key_set().has(c10::DispatchKey::Python);
  };
  return dense_cpu_or_npu(self) && dense_cpu_or_npu(from);
}

void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {
  // Kernels finish on the host before their launch returns: no cross-stream lifetime to track.
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("view.dtype", TORCH_FN(view_dtype));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
}

// empty_strided lives in a library of its own, so that the bring-up clinic can take it out of the dispatcher
// for a while (npu_lab.bringup.clinic.withheld): a backend whose factories stop at empty.memory_format is a
// bug backend authors report ("Could not run 'aten::empty_strided' with arguments from the 'PrivateUse1'
// backend" on the first tensor.to(device)). Registered when the runtime loads, like the static ones above.
namespace {
torch::Library* empty_strided_library = nullptr;
}  // namespace

void register_empty_strided(bool on) {
  if (on && empty_strided_library == nullptr) {
    empty_strided_library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                               __FILE__, __LINE__);
    empty_strided_library->impl("empty_strided", TORCH_FN(empty_strided));
  } else if (!on && empty_strided_library != nullptr) {
    delete empty_strided_library;  // its kernel leaves the dispatcher
    empty_strided_library = nullptr;
  }
}

bool empty_strided_registered() {
  return empty_strided_library != nullptr;
}

namespace {
// never destroyed at exit (the dispatcher may already be gone): only register_empty_strided(false) frees it
const bool empty_strided_at_load = (register_empty_strided(true), true);
}  // namespace

// A copy honours its tensors' conjugate and negative bits itself (host_alias keeps them), so those keys
// pass the copy straight through. Otherwise their fallback would materialise `src` with clone(), which
// copies through _copy_from again: endless recursion, for CUDA's copy has no _copy_from step.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace npu::aten

namespace npu::python {

// The operators registered above, for npu_lab.claimed_ops() and the chapters.
std::vector<std::string> native_ops() {
  return {"aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
          "aten::view.dtype", "aten::_reshape_alias", "aten::unfold", "aten::view_as_real",
          "aten::view_as_complex", "aten::resize_", "aten::set_.source_Storage_storage_offset",
          "aten::set_.source_Storage", "aten::set_.source_Tensor", "aten::set_", "aten::_copy_from",
          "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::_has_compatible_shallow_copy_type",
          "aten::record_stream"};
}

}  // namespace npu::python
