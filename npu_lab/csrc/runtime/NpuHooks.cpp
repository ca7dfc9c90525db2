// The PrivateUse1 hooks: what PyTorch asks an accelerator for outside any operator.
//
// torch.accelerator, torch.Generator(device="npu"), tensor.pin_memory(),
// UntypedStorage.resize_() and lazy initialisation all come through here.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

#include <cstring>

#include "NpuAllocator.h"
#include "NpuException.h"
#include "NpuGenerator.h"

namespace npu::runtime {

namespace {

struct NpuHooks final : public at::PrivateUse1HooksInterface {
  void init() const override {
    npuError_t err = npuInit();
    TORCH_CHECK(err != npuErrorInitializationError,
                "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, "
                "you must use the 'spawn' start method");
    NPU_CHECK(err);
  }

  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return deviceCount() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < deviceCount();
  }

  c10::DeviceIndex deviceCount() const override {
    int n = 0;
    npuGetDeviceCount(&n);
    return static_cast<c10::DeviceIndex>(n);
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    NPU_CHECK(npuSetDevice(device));
  }

  c10::DeviceIndex getCurrentDevice() const override {
    int d = 0;
    npuGetDevice(&d);
    return static_cast<c10::DeviceIndex>(d);
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = getCurrentDevice();
    if (device != old) {
      NPU_CHECK(npuSetDevice(device));
    }
    return old;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= deviceCount()) {
      return getCurrentDevice();
    }
    return exchangeDevice(device);
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_host_allocator();
  }

  c10::Device getDeviceFromPtr(void* data) const override {
    npuPointerAttributes attr{};
    NPU_CHECK(npuPointerGetAttributes(&attr, data));
    TORCH_CHECK(attr.type == npuMemoryTypeDevice, "pointer ", data, " is not in NPU device memory");
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(attr.device));
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  // UntypedStorage.resize_() of an npu storage: new device bytes, the old ones copied over.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    size_t old = impl->nbytes();
    if (newsize == old) {
      return;
    }
    c10::DataPtr fresh;
    {
      int current = 0;
      npuGetDevice(&current);
      NPU_CHECK(npuSetDevice(impl->device().index()));
      fresh = impl->allocator()->allocate(newsize);
      npuSetDevice(current);
    }
    size_t keep = std::min(old, newsize);
    if (keep > 0) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct Registrar {
  Registrar() {
    static NpuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
Registrar registrar;

}  // namespace

}  // namespace npu::runtime
