// Autocast for the NPU: `with torch.autocast("npu"):` runs matmuls and convolutions in float16
// (or bfloat16) and keeps numerically touchy operators in float32.
//
// Inside an autocast region the dispatcher calls the AutocastPrivateUse1 kernel of each operator
// before the npu kernel. PyTorch provides the wrappers (at::autocast::WrapFunction) and the lists
// of operators per cast policy (ATen/autocast_mode.h); a backend picks its policy for each list.
// The NPU follows CUDA's: lower precision for the products, float32 for reductions, losses and
// transcendental functions, and "promote to the widest input type" for mixed-input operators;
// one difference, as torch_openreg's: a dot product (dot, vdot) is one long reduction, so it runs
// in float32. Every other operator falls through to the npu kernel unchanged.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace npu::amp {

using at::Tensor;
using c10::IntArrayRef;
using c10::Scalar;
using c10::ScalarType;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define NPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NPU_FP32_APPEND_DTYPE(...) KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(__VA_ARGS__)
#define NPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// AT_FORALL_PROMOTE without dot and vdot, which the NPU keeps in float32.
#define NPU_PROMOTE_EXCEPT_DOTS(_) \
  _(addcdiv)                       \
  _(addcmul)                       \
  _(atan2)                         \
  _(bilinear)                      \
  _(cross)                         \
  _(grid_sampler)                  \
  _(index_put)                     \
  _(tensordot)                     \
  _(scatter_add)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(NPU_LOWER_PRECISION)
  AT_FORALL_FP32(NPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(NPU_FP32_APPEND_DTYPE)
  NPU_FP32(dot)
  NPU_FP32(vdot)
  NPU_PROMOTE_EXCEPT_DOTS(NPU_PROMOTE)
}

}  // namespace npu::amp

namespace npu::python {

// The operators of one cast policy, as registered above (for the chapters and the tests).
std::vector<std::string> autocast_policy(const std::string& policy) {
  std::vector<std::string> ops;
#define NPU_NAME_1(op) ops.emplace_back("aten::" #op);
#define NPU_NAME_2(op, overload) ops.emplace_back("aten::" #op "." #overload);
#define NPU_NAME_PICK(_1, _2, NAME, ...) NAME
#define NPU_NAME(...) NPU_NAME_PICK(__VA_ARGS__, NPU_NAME_2, NPU_NAME_1)(__VA_ARGS__)
#define NPU_NAME_REDISPATCH(fn, name, ...) ops.emplace_back(std::string("aten::") + name);
  if (policy == "lower_precision_fp") {
    AT_FORALL_LOWER_PRECISION_FP(NPU_NAME)
  } else if (policy == "fp32") {
    AT_FORALL_FP32(NPU_NAME)
    NPU_NAME(dot)
    NPU_NAME(vdot)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(NPU_NAME_REDISPATCH)
  } else if (policy == "fp32_set_opt_dtype") {
    AT_FORALL_FP32_SET_OPT_DTYPE(NPU_NAME)
  } else if (policy == "promote") {
    NPU_PROMOTE_EXCEPT_DOTS(NPU_NAME)
  } else {
    TORCH_CHECK_VALUE(false, "unknown autocast policy '", policy,
                      "'; one of lower_precision_fp, fp32, fp32_set_opt_dtype, promote");
  }
#undef NPU_NAME_1
#undef NPU_NAME_2
#undef NPU_NAME
#undef NPU_NAME_PICK
#undef NPU_NAME_REDISPATCH
  return ops;
}

}  // namespace npu::python
