#include "device.h"

#include "allocator.h"
#include "host_allocator.h"

#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

namespace neuronsim {

namespace {

std::atomic<int> g_device_count{2};
thread_local c10::DeviceIndex t_current_device = 0;
std::atomic<bool> g_context[kMaxDevices];
std::atomic<int64_t> g_device_ns[kMaxDevices];
std::atomic<uint32_t> g_next_stream[kMaxDevices];
thread_local std::array<c10::StreamId, kMaxDevices> t_current_stream{};

constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default_rng_seed_val

}  // namespace

int device_count() { return g_device_count.load(); }

void set_device_count(int n) {
  TORCH_CHECK(n >= 0 && n <= kMaxDevices, "neuron: device count must be in [0, ", kMaxDevices, "], got ", n);
  g_device_count.store(n);
}

void check_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid device neuron:", static_cast<int>(index), ": ",
              device_count(),
              " NeuronCore(s) are visible. Use an index below that, or change NEURON_RT_VISIBLE_CORES / "
              "NEURON_RT_NUM_CORES before importing torch.");
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_device(c10::DeviceIndex index) {
  check_device(index);
  t_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  const auto previous = t_current_device;
  if (index != previous) set_device(index);
  return previous;
}

void mark_context_created(c10::DeviceIndex index) { g_context[index].store(true); }
bool context_created(c10::DeviceIndex index) { return g_context[index].load(); }

int64_t device_time_ns(c10::DeviceIndex index) { return g_device_ns[index].load(); }
void advance_device_time(c10::DeviceIndex index, int64_t ns) {
  if (ns > 0) g_device_ns[index].fetch_add(ns);
}

namespace {
// Defaults match trn1 in device_impl/engine/constants.py; registration sets them from there.
std::atomic<double> g_copy_latency_ns{2000.0};
std::atomic<double> g_host_bytes_per_ns{16.0};
std::atomic<double> g_device_bytes_per_ns{410.0};
std::atomic<double> g_staging_bytes_per_ns{16.0};
}  // namespace

void set_copy_model(double latency_ns, double host_bytes_per_ns, double device_bytes_per_ns,
                    double staging_bytes_per_ns) {
  TORCH_CHECK(latency_ns >= 0 && host_bytes_per_ns > 0 && device_bytes_per_ns > 0 && staging_bytes_per_ns > 0,
              "neuron copy model: latency must be >= 0 and bandwidths > 0");
  g_copy_latency_ns.store(latency_ns);
  g_host_bytes_per_ns.store(host_bytes_per_ns);
  g_device_bytes_per_ns.store(device_bytes_per_ns);
  g_staging_bytes_per_ns.store(staging_bytes_per_ns);
}

int64_t copy_time_ns(int64_t bytes, bool host_side, bool pinned) {
  const double n = static_cast<double>(bytes);
  // a copy within HBM reads and writes every byte
  if (!host_side) return static_cast<int64_t>(g_copy_latency_ns.load() + 2.0 * n / g_device_bytes_per_ns.load());
  // a pageable host buffer is copied into a pinned bounce buffer before the DMA can read it
  const double staging = pinned ? 0.0 : n / g_staging_bytes_per_ns.load();
  return static_cast<int64_t>(g_copy_latency_ns.load() + n / g_host_bytes_per_ns.load() + staging);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                     t_current_stream[index]);
}

c10::Stream exchange_stream(c10::Stream stream) {
  const auto index = stream.device_index();
  auto previous = current_stream(index);
  t_current_stream[index] = stream.id();
  return previous;
}

c10::Stream new_stream(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  check_device(index);
  // Stream 0 is the default stream; pooled streams are 1..kStreamsPerDevice.
  const auto id = 1 + static_cast<c10::StreamId>(g_next_stream[index].fetch_add(1) % kStreamsPerDevice);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), id);
}

// --- generator --------------------------------------------------------------

NeuronGenerator::NeuronGenerator(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void NeuronGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void NeuronGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t NeuronGenerator::get_offset() const { return offset_; }
uint64_t NeuronGenerator::current_seed() const { return seed_; }

uint64_t NeuronGenerator::seed() {
  std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  set_current_seed(s);
  return s;
}

// State layout: 16 bytes, seed then offset (little-endian uint64), the same
// size CUDA's Philox generator uses.
void NeuronGenerator::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
              "neuron RNG state must be a uint8 tensor of 16 elements (seed, offset); got ", state.numel(),
              " elements of ", state.dtype().name(), ". Use the value returned by get_rng_state().");
  const auto* data = static_cast<const uint8_t*>(state.data());
  std::memcpy(&seed_, data, 8);
  std::memcpy(&offset_, data + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
  auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  auto* data = state.data_ptr<uint8_t>();
  std::memcpy(data, &seed_, 8);
  std::memcpy(data + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> NeuronGenerator::reserve(uint64_t increment) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t start = offset_;
  offset_ += (increment + 3) / 4 * 4;  // Philox hands out 4 numbers per counter step
  return {seed_, start};
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
  auto* g = new NeuronGenerator(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once[kMaxDevices];
  static at::Generator generators[kMaxDevices];
  if (index < 0) index = current_device();
  check_device(index);
  std::call_once(once[index], [&] { generators[index] = at::make_generator<NeuronGenerator>(index); });
  return generators[index];
}

c10::DeviceCapability device_capability() {
  // Engine compute dtypes, plus the storage-only ones whose conversions copy_ serves (float64, complex,
  // complex32: HBM holds it, DMA moves it, casts to and from it are host-staged copies).
  c10::DeviceCapability cap;
  cap.capability_data.capability_bits = 0;
  for (const auto t : {c10::ScalarType::Float, c10::ScalarType::BFloat16, c10::ScalarType::Half,
                       c10::ScalarType::Long, c10::ScalarType::Int, c10::ScalarType::Short, c10::ScalarType::Char,
                       c10::ScalarType::Byte, c10::ScalarType::Bool, c10::ScalarType::Double,
                       c10::ScalarType::ComplexHalf, c10::ScalarType::ComplexFloat,
                       c10::ScalarType::ComplexDouble}) {
    cap.capability_data.capability_bits |= 1ULL << static_cast<int>(t);
  }
  return cap;
}

// --- device guard -------------------------------------------------------------

namespace {

struct Event {
  c10::DeviceIndex device;
  bool timing;
  bool recorded = false;
  int64_t device_ns = 0;
};

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  NeuronGuardImpl() = default;
  explicit NeuronGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == static_type, "NeuronGuardImpl built for ", t);
  }
  c10::DeviceType type() const override { return static_type; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "Expected a neuron device, got ", d);
    return c10::Device(static_type, exchange_device(d.index()));
  }
  c10::Device getDevice() const override { return c10::Device(static_type, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "Expected a neuron device, got ", d);
    set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) t_current_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override { return current_stream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(static_type, d.index() < 0 ? current_device() : d.index()));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/ = 0) const override { return new_stream(d.index()); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/ = false) const override {
    return new_stream(d.index());
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return exchange_stream(s); }

  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(device_count()); }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match the recording stream's device ",
                static_cast<int>(stream.device_index()));
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      e = new Event{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
      *event = e;
    }
    TORCH_CHECK(e->device == stream.device_index(), "Event was recorded on neuron:", static_cast<int>(e->device),
                " and cannot be re-recorded on neuron:", static_cast<int>(stream.device_index()));
    run_synchronize_hook("event", stream.device_index());  // the timestamp must include queued work
    e->recorded = true;
    e->device_ns = device_time_ns(stream.device_index());
  }
  // Work is complete when its launch returns, so waiting never blocks; what adaptive eager still
  // holds back runs first (run_synchronize_hook), so every synchronisation point sees it done.
  void block(void* /*event*/, const c10::Stream& stream) const override {
    run_synchronize_hook("event", stream.device_index());
  }
  bool queryEvent(void* event) const override {
    const auto* e = static_cast<const Event*>(event);
    run_synchronize_hook("event", e != nullptr ? e->device : current_device());
    return true;
  }
  bool queryStream(const c10::Stream& stream) const override {
    run_synchronize_hook("stream", stream.device_index());
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    run_synchronize_hook("stream", stream.device_index());
  }
  void synchronizeEvent(void* event) const override {
    const auto* e = static_cast<const Event*>(event);
    run_synchronize_hook("event", e != nullptr ? e->device : current_device());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    const auto index = device_index < 0 ? current_device() : device_index;
    // the message of torch.neuron.synchronize (device_impl/runtime/devices.py)
    TORCH_CHECK(index < device_count(), "Invalid device neuron:", static_cast<int>(index), ": ", device_count(),
                " NeuronCore(s) are visible.");
    run_synchronize_hook("synchronize", index);
  }
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    if (d.index() >= 0) check_device(d.index());
    return device_capability();
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex /*device_index*/) const override {
    auto* a = static_cast<Event*>(event1);
    auto* b = static_cast<Event*>(event2);
    TORCH_CHECK(a && b && a->recorded && b->recorded,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(a->timing && b->timing,
                "Both events must be created with argument 'enable_timing=True' to measure elapsed time.");
    TORCH_CHECK(a->device == b->device, "Events were recorded on different neuron devices.");
    return static_cast<double>(b->device_ns - a->device_ns) / 1e6;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

// --- hooks ------------------------------------------------------------------

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count() && context_created(index);
  }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override { return exchange_device(index); }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    if (index < 0 || index >= device_count()) return current_device();
    return exchange_device(index);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    check_device(index);
    return at::make_generator<NeuronGenerator>(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const auto index = allocator().device_of(data);
    TORCH_CHECK(index >= 0, "pointer ", data, " is not in simulated neuron HBM");
    return at::Device(c10::DeviceType::PrivateUse1, index);
  }
  // Pinned memory is the host allocator's (host_allocator.h): is_pinned() asks it, pin_memory() allocates from it.
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    const auto old_size = storage.nbytes();
    const c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = allocator().allocate(newsize);
    const size_t keep = std::min(old_size, newsize);
    if (keep > 0) std::memcpy(fresh.get(), storage.data(), keep);
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator());
  }
};
RegisterHooks g_register_hooks;

}  // namespace

}  // namespace neuronsim
