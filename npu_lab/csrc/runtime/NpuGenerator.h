// The NPU's random number generator: a Philox (seed, offset) state, as CUDA's.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace npu::runtime {

// The state is two numbers: a seed, and an offset counting the Philox4x64 blocks
// already consumed. Random kernels ask for a number of blocks, get the
// (seed, offset) to start from, and the offset moves past them, so saving and
// restoring the 16-byte state replays the stream exactly.
struct NpuGeneratorImpl : public c10::GeneratorImpl {
  explicit NpuGeneratorImpl(c10::DeviceIndex device_index = -1);
  ~NpuGeneratorImpl() override = default;

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserve `blocks` Philox blocks: returns (seed, first offset) and advances the offset.
  std::pair<uint64_t, uint64_t> reserve(uint64_t blocks);

  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

 private:
  NpuGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device_index);
at::Generator new_generator(c10::DeviceIndex device_index);

}  // namespace npu::runtime
