// Quantized tensors on the NPU: int8/uint8/int32 values with a scale and a zero point.
//
// PyTorch's quantization code is device-generic down to two "stubs" per scheme: the loops that
// turn float values into integers and back. A backend registers those (REGISTER_PRIVATEUSE1_DISPATCH)
// plus the few operators whose kernels are per quantized backend key; at::native then builds
// quantized npu tensors (key QuantizedPrivateUse1, bytes from the NPU's allocator) by itself.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/quantized/AffineQuantizer.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/dequantize_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/quantize_per_tensor_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../driver/npu_driver.h"

namespace npu::aten {

namespace {

template <typename Q>
void quantize_loop(const float* in, Q* out, int64_t n, double scale, int64_t zero_point) {
  const float inv_scale = 1.0f / static_cast<float>(scale);
  const int64_t lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
  for (int64_t i = 0; i < n; ++i) {
    int64_t q = zero_point + static_cast<int64_t>(std::nearbyint(in[i] * inv_scale));
    out[i] = static_cast<Q>(std::min(std::max(q, lo), hi));
  }
}

template <typename Q>
void dequantize_loop(const Q* in, float* out, int64_t n, double scale, int64_t zero_point) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>((static_cast<int64_t>(in[i]) - zero_point) * scale);
  }
}

void account(const at::Tensor& a, const at::Tensor& b, double flops_per_element, const char* name) {
  const int64_t n = a.numel();
  npuLaunchKernel(name, flops_per_element * double(n), n * a.element_size(), n * b.element_size(),
                  a.device().index());
}

void quantize_per_tensor_affine(const at::Tensor& rtensor, at::Tensor& qtensor, double scale, int64_t zero_point) {
  TORCH_CHECK(rtensor.scalar_type() == at::kFloat, "npu quantization takes float32 input, got ",
              rtensor.scalar_type());
  const c10::DeviceGuard guard(rtensor.device());
  at::Tensor src = rtensor.contiguous();
  TORCH_CHECK(qtensor.is_contiguous(), "npu quantization writes a contiguous quantized tensor");
  const float* in = src.const_data_ptr<float>();
  const int64_t n = src.numel();
  switch (qtensor.scalar_type()) {
    case at::kQInt8: quantize_loop(in, static_cast<int8_t*>(qtensor.data_ptr()), n, scale, zero_point); break;
    case at::kQUInt8: quantize_loop(in, static_cast<uint8_t*>(qtensor.data_ptr()), n, scale, zero_point); break;
    case at::kQInt32: quantize_loop(in, static_cast<int32_t*>(qtensor.data_ptr()), n, scale, zero_point); break;
    default: TORCH_CHECK(false, "npu quantization supports qint8, quint8 and qint32, not ", qtensor.scalar_type());
  }
  account(src, qtensor, 3.0, "quantize_per_tensor");
}

void dequantize_per_tensor_affine(const at::Tensor& qtensor, at::Tensor& rtensor, double scale, int64_t zero_point) {
  TORCH_CHECK(rtensor.scalar_type() == at::kFloat && rtensor.is_contiguous(),
              "npu dequantization writes a contiguous float32 tensor");
  const c10::DeviceGuard guard(qtensor.device());
  at::Tensor src = qtensor.contiguous();
  float* out = rtensor.data_ptr<float>();
  const int64_t n = src.numel();
  switch (src.scalar_type()) {
    case at::kQInt8: dequantize_loop(static_cast<const int8_t*>(src.const_data_ptr()), out, n, scale, zero_point); break;
    case at::kQUInt8: dequantize_loop(static_cast<const uint8_t*>(src.const_data_ptr()), out, n, scale, zero_point); break;
    case at::kQInt32: dequantize_loop(static_cast<const int32_t*>(src.const_data_ptr()), out, n, scale, zero_point); break;
    default: TORCH_CHECK(false, "npu dequantization supports qint8, quint8 and qint32, not ", src.scalar_type());
  }
  account(src, rtensor, 2.0, "dequantize_per_tensor");
}

at::Tensor quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point, at::ScalarType dtype) {
  const c10::DeviceGuard guard(self.device());
  return at::native::quantize_per_tensor(self, scale, zero_point, dtype);
}

at::Tensor empty_affine_quantized(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory, double scale, int64_t zero_point,
                                  std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::native::empty_affine_quantized(size, dtype, layout, device, pin_memory, scale, zero_point,
                                            memory_format);
}

}  // namespace

// Registered by register_compute_kernels() (python/module.cpp) unless the device is bare (NPU_LAB_BARE=1).
void register_quantize_kernels(torch::Library& m) {
  m.impl("quantize_per_tensor", TORCH_FN(quantize_per_tensor));
}

void register_quantized_kernels(torch::Library& m) {
  m.impl("_empty_affine_quantized", TORCH_FN(empty_affine_quantized));
  m.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
  m.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
  m.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
  m.impl("dequantize.self", TORCH_FN(at::native::dequantize_quantized));
}

}  // namespace npu::aten

namespace at::native {
// The macro names the stub unqualified, so it is used in the stubs' own namespace.
REGISTER_PRIVATEUSE1_DISPATCH(quantize_tensor_per_tensor_affine_stub, &npu::aten::quantize_per_tensor_affine)
REGISTER_PRIVATEUSE1_DISPATCH(dequantize_tensor_per_tensor_affine_stub, &npu::aten::dequantize_per_tensor_affine)
}  // namespace at::native
