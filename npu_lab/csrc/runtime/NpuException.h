// Turning driver error codes into PyTorch exceptions.
#pragma once

#include <c10/util/Exception.h>

#include "../driver/npu_driver.h"

#define NPU_CHECK(expr)                                                                              \
  do {                                                                                               \
    const ::npu::npuError_t npu_err_ = (expr);                                                        \
    TORCH_CHECK(npu_err_ == ::npu::npuSuccess, "NPU driver error: ", ::npu::npuGetErrorString(npu_err_), \
                " (in ", #expr, ")");                                                                \
  } while (0)
