// The NPU's random number generators: one default per device, and new ones on request.
#include "NpuGenerator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/GeneratorForPrivateuseone.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "NpuException.h"

namespace npu::runtime {

NpuGeneratorImpl::NpuGeneratorImpl(c10::DeviceIndex device_index)
    : c10::GeneratorImpl{c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      seed_(c10::default_rng_seed_val) {}

void NpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void NpuGeneratorImpl::set_offset(uint64_t offset) {
  offset_ = offset;
}

uint64_t NpuGeneratorImpl::get_offset() const {
  return offset_;
}

uint64_t NpuGeneratorImpl::current_seed() const {
  return seed_;
}

uint64_t NpuGeneratorImpl::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void NpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(new_state.numel() == 16, "npu RNG state must be a uint8 tensor of 16 bytes (seed, offset), got ",
              new_state.numel(), " bytes");
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof(words));
  seed_ = words[0];
  offset_ = words[1];
}

c10::intrusive_ptr<c10::TensorImpl> NpuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt, std::nullopt, std::nullopt,
                                     std::nullopt);
  uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, sizeof(words));
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> NpuGeneratorImpl::reserve(uint64_t blocks) {
  std::pair<uint64_t, uint64_t> start{seed_, offset_};
  offset_ += blocks;
  return start;
}

NpuGeneratorImpl* NpuGeneratorImpl::clone_impl() const {
  auto* g = new NpuGeneratorImpl(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device_index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    int n = 0;
    npuGetDeviceCount(&n);
    for (int i = 0; i < n; ++i) {
      generators.push_back(at::make_generator<NpuGeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
    }
  });
  if (device_index < 0) {
    int d = 0;
    npuGetDevice(&d);
    device_index = static_cast<c10::DeviceIndex>(d);
  }
  TORCH_CHECK(device_index < static_cast<c10::DeviceIndex>(generators.size()), "Invalid device npu:",
              static_cast<int>(device_index));
  return generators[device_index];
}

at::Generator new_generator(c10::DeviceIndex device_index) {
  if (device_index < 0) {
    int d = 0;
    npuGetDevice(&d);
    device_index = static_cast<c10::DeviceIndex>(d);
  }
  return at::make_generator<NpuGeneratorImpl>(device_index);
}

}  // namespace npu::runtime
