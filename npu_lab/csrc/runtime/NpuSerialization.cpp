// Backend metadata: facts the NPU keeps beside a tensor, saved with it and copied with it.
//
// A real NPU stores more than sizes and strides for some tensors: Ascend's torch_npu, for one,
// records the private storage format a tensor's bytes are laid out in. PyTorch gives every
// TensorImpl a slot for such backend metadata (c10::BackendMeta) and lets a PrivateUse1 backend
// register two functions that turn it into named flags and back. torch.save/torch.load and
// torch.jit.save/load store the flags with the tensor, `torch._C._copy_backend_meta` copies
// them, and FakeTensor (torch.compile) carries them into traced graphs. The NPU's metadata is
// simply a set of named flags (`torch._utils.set_tensor_metadata(t, {"name": True})`).
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace npu::runtime {

namespace {

struct NpuBackendMeta final : public c10::BackendMeta {
  explicit NpuBackendMeta(std::map<std::string, bool> flags) : flags(std::move(flags)) {}
  std::map<std::string, bool> flags;
};

// tensor -> flags (what torch.save writes and torch._utils.get_tensor_metadata returns)
void write_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& out) {
  auto* meta = dynamic_cast<NpuBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  if (meta != nullptr) {
    for (const auto& [name, value] : meta->flags) {
      out[name] = value;
    }
  }
}

// flags -> tensor (torch.load, torch._utils.set_tensor_metadata)
void read_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& in) {
  if (in.empty()) {
    return;
  }
  std::map<std::string, bool> flags(in.begin(), in.end());
  t.unsafeGetTensorImpl()->set_backend_meta(
      c10::intrusive_ptr<c10::BackendMeta>{std::unique_ptr<c10::BackendMeta>(new NpuBackendMeta(std::move(flags)))});
}

struct Registrar {
  Registrar() {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &write_flags, &read_flags);
  }
};
Registrar registrar;

}  // namespace

}  // namespace npu::runtime
