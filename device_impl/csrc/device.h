// Device runtime of the simulated NeuronCores: which cores exist, which one
// the calling thread uses, its streams, events, generators and clock.
//
// Execution on the simulated device is synchronous (a kernel has finished
// when its launch returns), so streams are ordering domains that are always
// satisfied and events complete at record time. What events measure is the
// device timeline: each core keeps a clock that kernels advance by their
// simulated duration, so elapsed_time() answers "how long would the device
// have been busy", which is the question a user timing a region asks.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/Stream.h>

#include <cstdint>

namespace neuronsim {

int device_count();
void set_device_count(int n);
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
void check_device(c10::DeviceIndex index);

// A core's context exists once it has been used (as CUDA's primary context).
void mark_context_created(c10::DeviceIndex index);
bool context_created(c10::DeviceIndex index);

// Simulated device timeline, nanoseconds since the process started.
int64_t device_time_ns(c10::DeviceIndex index);
void advance_device_time(c10::DeviceIndex index, int64_t ns);

// Modeled duration of a copy that _copy_from performs (set from device_impl.engine.constants):
// a fixed DMA latency plus bytes over the link's bandwidth. Host <-> device crosses PCIe; a copy
// within one core's HBM is a DMA read and write at the core's DMA bandwidth. A host buffer that is
// not pinned (host_allocator.h) is first staged by the host into a pinned bounce buffer, serially
// with the DMA, at the staging rate.
void set_copy_model(double latency_ns, double host_bytes_per_ns, double device_bytes_per_ns,
                    double staging_bytes_per_ns);
int64_t copy_time_ns(int64_t bytes, bool host_side, bool pinned = true);

constexpr int kStreamsPerDevice = 32;
c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream exchange_stream(c10::Stream stream);
c10::Stream new_stream(c10::DeviceIndex index);

// Counter-based generator (seed, offset), as a Philox stream would keep:
// kernels reserve `increment` draws and get the (seed, offset) to start at,
// so the sequence depends only on the seed and the order of requests.
class NeuronGenerator final : public c10::GeneratorImpl {
 public:
  explicit NeuronGenerator(c10::DeviceIndex index);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  std::pair<uint64_t, uint64_t> reserve(uint64_t increment);

 private:
  NeuronGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex index);

// Synchronisation points (device/stream/event synchronize, event record/wait/query, stream query)
// call a Python function registered by device_impl (module.cpp: set_synchronize_hook): adaptive
// eager holds queued work that must have run before "synchronized" or a timestamp means anything.
// No-op until registered. A Python exception is rethrown as c10::Error carrying its message.
void run_synchronize_hook(const char* reason, c10::DeviceIndex index);

// The dtypes a neuron tensor can hold and convert between (torch.accelerator.get_device_capability).
c10::DeviceCapability device_capability();

}  // namespace neuronsim
