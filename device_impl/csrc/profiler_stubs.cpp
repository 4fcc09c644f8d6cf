// The PrivateUse1 profiler stubs: what torch.autograd.profiler.profile(use_device="neuron") calls
// (ProfilerState::KINETO_PRIVATEUSE1_FALLBACK) at the start and end of every op it records.
//
// Why: without them the legacy profiler falls back to a default stub that warns "PrivateUse1 used
// in profiler but not enabled" and asserts on every op, and reports garbage device times. An event
// here is a snapshot of every core's simulated device clock (device.h: device_time_ns), so the
// elapsed time of an op is the device time its kernels and copies added -- the same simulated time
// the Kineto path (device_impl/profiler.py) attaches per launch. Every core is snapshotted because
// the profiler records an op before the op's device guard selects its core. No synchronisation:
// work adaptive eager holds back is charged to the op that runs it (as CUDA charges an async kernel
// to whatever is timed when it executes).
#include "device.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <cmath>
#include <memory>
#include <vector>

namespace neuronsim {
void run_synchronize_hook(const char* reason, c10::DeviceIndex index);
}

namespace torch::profiler::impl {
namespace {

struct ClockSnapshot {
  std::vector<int64_t> device_ns;  // per core
};

struct NeuronProfilerStubs final : public ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (device != nullptr) *device = neuronsim::current_device();
    auto snapshot = std::make_shared<ClockSnapshot>();
    const int n = neuronsim::device_count();
    snapshot->device_ns.resize(n);
    for (int i = 0; i < n; ++i) snapshot->device_ns[i] = neuronsim::device_time_ns(static_cast<c10::DeviceIndex>(i));
    *event = std::static_pointer_cast<void>(snapshot);
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // Microseconds of simulated device time between two records, summed over cores, rounded to the nearest
  // microsecond: torch keeps this as an integer (KinetoEvent::privateuse1ElapsedUs truncates), and
  // truncation would bias every op low by half a microsecond on average.
  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2) const override {
    if (event == nullptr || event2 == nullptr || !*event || !*event2) return 0.0f;
    const auto* a = static_cast<const ClockSnapshot*>(event->get());
    const auto* b = static_cast<const ClockSnapshot*>(event2->get());
    int64_t ns = 0;
    const size_t n = std::min(a->device_ns.size(), b->device_ns.size());
    for (size_t i = 0; i < n; ++i) ns += b->device_ns[i] - a->device_ns[i];
    return static_cast<float>(std::nearbyint(static_cast<double>(ns) / 1000.0));
  }

  // The device has no annotation API (NVTX's role); ranges reach the trace through Kineto instead.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, 0));
    for (int i = 0; i < neuronsim::device_count(); ++i) {
      guard.set_index(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
  }

  void synchronize() const override {
    for (int i = 0; i < neuronsim::device_count(); ++i) {
      neuronsim::run_synchronize_hook("synchronize", static_cast<c10::DeviceIndex>(i));
    }
  }

  bool enabled() const override { return true; }
};

struct RegisterStubs {
  RegisterStubs() {
    static NeuronProfilerStubs stubs;
    registerPrivateUse1Methods(&stubs);
  }
};
RegisterStubs g_register_stubs;

}  // namespace
}  // namespace torch::profiler::impl
