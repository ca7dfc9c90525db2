// Sparse tensors on the NPU: COO (key SparsePrivateUse1) and compressed CSR/CSC/BSR/BSC
// (key SparseCsrPrivateUse1).
//
// A sparse tensor is a small header around dense tensors: COO keeps `indices` and `values`,
// CSR keeps `crow_indices`, `col_indices` and `values`. Many of PyTorch's sparse kernels only
// rearrange those members and call dense operators on them, so they run on any device whose
// dense operators exist; PyTorch marks them by registering the same function for the Meta sparse
// keys. This file registers exactly those device-generic kernels for the npu's sparse keys
// (constructors, member accessors, copies and resizes, and the CSR pointwise operators, which
// apply the dense npu kernel to `values`). Every other sparse operator has no npu kernel: with
// the CPU fallback on it runs on the CPU (npu_lab/device/fallback.py registers the fallback for
// these keys too), with it off PyTorch's "Could not run ... 'SparsePrivateUse1' backend" error.
//
// The list is native_functions.yaml's entries dispatched to SparseCUDA and SparseMeta (or their
// CSR twins) with one kernel, checked on torch 2.13.
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_conj_physical_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_to_sparse_bsc_native.h>
#include <ATen/ops/_to_sparse_bsr_native.h>
#include <ATen/ops/_to_sparse_csc_native.h>
#include <ATen/ops/_to_sparse_csr_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/angle_native.h>
#include <ATen/ops/asin_native.h>
#include <ATen/ops/asinh_native.h>
#include <ATen/ops/atan_native.h>
#include <ATen/ops/atanh_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/ceil_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/conj_physical_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/deg2rad_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/erf_native.h>
#include <ATen/ops/erfinv_native.h>
#include <ATen/ops/expm1_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/floor_native.h>
#include <ATen/ops/frac_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/isinf_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/isposinf_native.h>
#include <ATen/ops/log1p_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/normal_native.h>
#include <ATen/ops/rad2deg_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/round_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/select_copy_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/sgn_native.h>
#include <ATen/ops/sign_native.h>
#include <ATen/ops/signbit_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sinh_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_mask_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/tan_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/trunc_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/zeros_native.h>
#include <torch/library.h>

namespace npu::aten {

// Registered by register_compute_kernels() (python/module.cpp) unless the device is bare (NPU_LAB_BARE=1).
void register_sparse_coo_kernels(torch::Library& m) {
  m.impl("add.Tensor", TORCH_FN(at::native::add_sparse));
  m.impl("add_.Tensor", TORCH_FN(at::native::add_sparse_));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_sparse_coo));
  m.impl("sum", TORCH_FN(at::native::sum_coo));
  m.impl("zeros.out", TORCH_FN(at::native::zeros_sparse_out));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_));
}

void register_sparse_csr_kernels(torch::Library& m) {
  m.impl("abs", TORCH_FN(at::native::abs_sparse_csr));
  m.impl("abs_", TORCH_FN(at::native::abs_sparse_csr_));
  m.impl("abs.out", TORCH_FN(at::native::abs_sparse_csr_out));
  m.impl("angle", TORCH_FN(at::native::angle_sparse_csr));
  m.impl("angle.out", TORCH_FN(at::native::angle_sparse_csr_out));
  m.impl("sgn", TORCH_FN(at::native::sgn_sparse_csr));
  m.impl("sgn_", TORCH_FN(at::native::sgn_sparse_csr_));
  m.impl("sgn.out", TORCH_FN(at::native::sgn_sparse_csr_out));
  m.impl("_conj_physical", TORCH_FN(at::native::conj_physical_sparse_csr));
  m.impl("conj_physical.out", TORCH_FN(at::native::conj_physical_sparse_csr_out));
  m.impl("conj_physical_", TORCH_FN(at::native::conj_physical_sparse_csr_));
  m.impl("add.Tensor", TORCH_FN(at::native::add_sparse_csr));
  m.impl("add_.Tensor", TORCH_FN(at::native::add_sparse_csr_));
  m.impl("asinh", TORCH_FN(at::native::asinh_sparse_csr));
  m.impl("asinh_", TORCH_FN(at::native::asinh_sparse_csr_));
  m.impl("asinh.out", TORCH_FN(at::native::asinh_sparse_csr_out));
  m.impl("atanh", TORCH_FN(at::native::atanh_sparse_csr));
  m.impl("atanh_", TORCH_FN(at::native::atanh_sparse_csr_));
  m.impl("atanh.out", TORCH_FN(at::native::atanh_sparse_csr_out));
  m.impl("asin", TORCH_FN(at::native::asin_sparse_csr));
  m.impl("asin_", TORCH_FN(at::native::asin_sparse_csr_));
  m.impl("asin.out", TORCH_FN(at::native::asin_sparse_csr_out));
  m.impl("atan", TORCH_FN(at::native::atan_sparse_csr));
  m.impl("atan_", TORCH_FN(at::native::atan_sparse_csr_));
  m.impl("atan.out", TORCH_FN(at::native::atan_sparse_csr_out));
  m.impl("ceil", TORCH_FN(at::native::ceil_sparse_csr));
  m.impl("ceil_", TORCH_FN(at::native::ceil_sparse_csr_));
  m.impl("ceil.out", TORCH_FN(at::native::ceil_sparse_csr_out));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("resize_", TORCH_FN(at::native::resize_sparse_csr_));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_sparse_csr));
  m.impl("erf", TORCH_FN(at::native::erf_sparse_csr));
  m.impl("erf_", TORCH_FN(at::native::erf_sparse_csr_));
  m.impl("erf.out", TORCH_FN(at::native::erf_sparse_csr_out));
  m.impl("expm1", TORCH_FN(at::native::expm1_sparse_csr));
  m.impl("expm1_", TORCH_FN(at::native::expm1_sparse_csr_));
  m.impl("expm1.out", TORCH_FN(at::native::expm1_sparse_csr_out));
  m.impl("fill_.Scalar", TORCH_FN(at::native::fill_sparse_csr_));
  m.impl("floor", TORCH_FN(at::native::floor_sparse_csr));
  m.impl("floor_", TORCH_FN(at::native::floor_sparse_csr_));
  m.impl("floor.out", TORCH_FN(at::native::floor_sparse_csr_out));
  m.impl("frac", TORCH_FN(at::native::frac_sparse_csr));
  m.impl("frac_", TORCH_FN(at::native::frac_sparse_csr_));
  m.impl("frac.out", TORCH_FN(at::native::frac_sparse_csr_out));
  m.impl("isnan", TORCH_FN(at::native::isnan_sparse_csr));
  m.impl("log1p", TORCH_FN(at::native::log1p_sparse_csr));
  m.impl("log1p_", TORCH_FN(at::native::log1p_sparse_csr_));
  m.impl("log1p.out", TORCH_FN(at::native::log1p_sparse_csr_out));
  m.impl("mm", TORCH_FN(at::native::_sparse_csr_mm));
  m.impl("mm.out", TORCH_FN(at::native::_sparse_csr_mm_out));
  m.impl("mul.Tensor", TORCH_FN(at::native::mul_sparse_csr));
  m.impl("mul_.Tensor", TORCH_FN(at::native::mul_sparse_csr_));
  m.impl("mul.out", TORCH_FN(at::native::mul_out_sparse_csr));
  m.impl("mul.Scalar", TORCH_FN(at::native::mul_scalar_sparse_csr));
  m.impl("mul_.Scalar", TORCH_FN(at::native::mul__scalar_sparse_csr));
  m.impl("rad2deg", TORCH_FN(at::native::rad2deg_sparse_csr));
  m.impl("rad2deg_", TORCH_FN(at::native::rad2deg_sparse_csr_));
  m.impl("rad2deg.out", TORCH_FN(at::native::rad2deg_sparse_csr_out));
  m.impl("deg2rad", TORCH_FN(at::native::deg2rad_sparse_csr));
  m.impl("deg2rad_", TORCH_FN(at::native::deg2rad_sparse_csr_));
  m.impl("deg2rad.out", TORCH_FN(at::native::deg2rad_sparse_csr_out));
  m.impl("neg", TORCH_FN(at::native::neg_sparse_csr));
  m.impl("neg_", TORCH_FN(at::native::neg_sparse_csr_));
  m.impl("neg.out", TORCH_FN(at::native::neg_sparse_csr_out));
  m.impl("round", TORCH_FN(at::native::round_sparse_csr));
  m.impl("round_", TORCH_FN(at::native::round_sparse_csr_));
  m.impl("round.out", TORCH_FN(at::native::round_sparse_csr_out));
  m.impl("relu", TORCH_FN(at::native::relu_sparse_csr));
  m.impl("relu_", TORCH_FN(at::native::relu_sparse_csr_));
  m.impl("select.int", TORCH_FN(at::native::select_sparse_csr));
  m.impl("sin", TORCH_FN(at::native::sin_sparse_csr));
  m.impl("sin_", TORCH_FN(at::native::sin_sparse_csr_));
  m.impl("sin.out", TORCH_FN(at::native::sin_sparse_csr_out));
  m.impl("sinh", TORCH_FN(at::native::sinh_sparse_csr));
  m.impl("sinh_", TORCH_FN(at::native::sinh_sparse_csr_));
  m.impl("sinh.out", TORCH_FN(at::native::sinh_sparse_csr_out));
  m.impl("sum", TORCH_FN(at::native::sum_csr));
  m.impl("sum.dim_IntList", TORCH_FN(at::native::sum_sparse_compressed));
  m.impl("sqrt", TORCH_FN(at::native::sqrt_sparse_csr));
  m.impl("sqrt_", TORCH_FN(at::native::sqrt_sparse_csr_));
  m.impl("sqrt.out", TORCH_FN(at::native::sqrt_sparse_csr_out));
  m.impl("tan", TORCH_FN(at::native::tan_sparse_csr));
  m.impl("tan_", TORCH_FN(at::native::tan_sparse_csr_));
  m.impl("tan.out", TORCH_FN(at::native::tan_sparse_csr_out));
  m.impl("tanh", TORCH_FN(at::native::tanh_sparse_csr));
  m.impl("tanh_", TORCH_FN(at::native::tanh_sparse_csr_));
  m.impl("tanh.out", TORCH_FN(at::native::tanh_sparse_csr_out));
  m.impl("threshold_backward.grad_input", TORCH_FN(at::native::threshold_backward_sparse_compressed_out));
  m.impl("threshold_backward", TORCH_FN(at::native::threshold_backward_sparse_compressed));
  m.impl("trunc", TORCH_FN(at::native::trunc_sparse_csr));
  m.impl("trunc_", TORCH_FN(at::native::trunc_sparse_csr_));
  m.impl("trunc.out", TORCH_FN(at::native::trunc_sparse_csr_out));
  m.impl("clone", TORCH_FN(at::native::clone_sparse_compressed));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_csr_));
  m.impl("addmm", TORCH_FN(at::native::addmm_sparse_compressed_dense));
  m.impl("sparse_mask", TORCH_FN(at::native::sparse_mask_sparse_compressed));
  m.impl("_to_dense", TORCH_FN(at::native::sparse_compressed_to_dense));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  // two overloads share this native name: pick each by its signature
  m.impl("_to_sparse.sparse_dim",
         static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(&at::native::sparse_compressed_to_sparse));
  m.impl("_to_sparse",
         static_cast<at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>, at::OptionalIntArrayRef,
                                    std::optional<int64_t>)>(&at::native::sparse_compressed_to_sparse));
  m.impl("_to_sparse_csr", TORCH_FN(at::native::sparse_compressed_to_sparse_csr));
  m.impl("_to_sparse_csc", TORCH_FN(at::native::sparse_compressed_to_sparse_csc));
  m.impl("_to_sparse_bsr", TORCH_FN(at::native::sparse_compressed_to_sparse_bsr));
  m.impl("_to_sparse_bsc", TORCH_FN(at::native::sparse_compressed_to_sparse_bsc));
  m.impl("erfinv", TORCH_FN(at::native::erfinv_sparse_csr));
  m.impl("erfinv_", TORCH_FN(at::native::erfinv_sparse_csr_));
  m.impl("erfinv.out", TORCH_FN(at::native::erfinv_sparse_csr_out));
  m.impl("sign", TORCH_FN(at::native::sign_sparse_csr));
  m.impl("sign_", TORCH_FN(at::native::sign_sparse_csr_));
  m.impl("sign.out", TORCH_FN(at::native::sign_sparse_csr_out));
  m.impl("signbit", TORCH_FN(at::native::signbit_sparse_csr));
  m.impl("signbit.out", TORCH_FN(at::native::signbit_sparse_csr_out));
  m.impl("normal_", TORCH_FN(at::native::normal_sparse_csr_));
  m.impl("isinf", TORCH_FN(at::native::isinf_sparse_csr));
  m.impl("isposinf", TORCH_FN(at::native::isposinf_sparse_csr));
  m.impl("isposinf.out", TORCH_FN(at::native::isposinf_sparse_csr_out));
  m.impl("isneginf", TORCH_FN(at::native::isneginf_sparse_csr));
  m.impl("isneginf.out", TORCH_FN(at::native::isneginf_sparse_csr_out));
  m.impl("select_copy.int", TORCH_FN(at::native::select_copy_sparse_csr));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed));
}

}  // namespace npu::aten
