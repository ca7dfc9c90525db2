// Which implementation of scaled-dot-product attention runs on the NPU.
//
// F.scaled_dot_product_attention is one composite operator. Before it computes anything it asks the device,
// through a C++ dispatch stub (_fused_sdp_choice_stub), which implementation to use: a value of SDPBackend.
// A device that registers no stub always gets the math path (matrix products, a mask and a softmax, about
// fifteen kernels forward). PyTorch 2.13 asks this stub, not the aten::_fused_sdp_choice operator, so the
// NPU fills the stub here and forwards the question to that operator: its PrivateUse1 kernel
// (npu_lab/ops/attention.py) knows what the NPU's fused kernel can do and which backends sdpa_kernel() allows.
// A bare device (NPU_LAB_BARE=1) registers no such kernel and gets the math path, as before.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>

namespace npu::aten {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_fused_sdp_choice", "");
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  // 16-bit attention stays on the math path, whose every step rounds to 16 bits as the CPU's does. The fused
  // kernel computes 16-bit inputs in float32 inside (the operator says it can take them, and torch_openreg's
  // tests ask it so), which is more precise than, and so different from, the CPU's answer.
  if (query.scalar_type() == at::kHalf || query.scalar_type() == at::kBFloat16) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  // Straight to the NPU's kernel: the stub is also asked while tracing with fake npu tensors, and a full
  // dispatch there would come back to the meta kernel, which asks this stub again.
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), query, key,
                                                 value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace npu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &npu::aten::fused_sdp_choice)
}  // namespace at::native
