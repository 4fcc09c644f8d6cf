// Python bindings of the C++ core: the narrow surface device_impl.runtime
// and the engine need. Everything user-facing is wrapped in Python.
#include "allocator.h"
#include "device.h"
#include "host_allocator.h"

#include <pybind11/numpy.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/extension.h>

#include <array>
#include <string>

namespace neuronsim {
at::Tensor host_view(const at::Tensor& t);
void set_cast_hook(pybind11::object hook);

namespace {
pybind11::object* g_synchronize_hook = nullptr;  // intentionally leaked: lives until exit
}

void run_synchronize_hook(const char* reason, c10::DeviceIndex index) {
  if (g_synchronize_hook == nullptr || !Py_IsInitialized()) return;
  pybind11::gil_scoped_acquire gil;
  std::string message;
  try {
    (*g_synchronize_hook)(reason, static_cast<int>(index));
    return;
  } catch (pybind11::error_already_set& e) {
    message = pybind11::str(e.value());  // the Python message, without the exception's type name
  }
  TORCH_CHECK(false, message);
}
}  // namespace neuronsim

namespace {

namespace py = pybind11;
using neuronsim::allocator;

py::dict stat_dict(const c10::CachingAllocator::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict stat_array_dict(const c10::CachingAllocator::StatArray& a) {
  py::dict d;
  d["all"] = stat_dict(a[0]);
  d["small_pool"] = stat_dict(a[1]);
  d["large_pool"] = stat_dict(a[2]);
  return d;
}

py::dict memory_stats(int device) {
  const auto s = allocator().heap(device).stats();
  py::dict d;
  d["allocation"] = stat_array_dict(s.allocation);
  d["segment"] = stat_array_dict(s.segment);
  d["active"] = stat_array_dict(s.active);
  d["inactive_split"] = stat_array_dict(s.inactive_split);
  d["allocated_bytes"] = stat_array_dict(s.allocated_bytes);
  d["reserved_bytes"] = stat_array_dict(s.reserved_bytes);
  d["active_bytes"] = stat_array_dict(s.active_bytes);
  d["inactive_split_bytes"] = stat_array_dict(s.inactive_split_bytes);
  d["requested_bytes"] = stat_array_dict(s.requested_bytes);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["capacity_bytes"] = allocator().heap(device).capacity();
  return d;
}

py::list memory_snapshot(int device) {
  py::list out;
  for (const auto& seg : allocator().heap(device).snapshot()) {
    py::list blocks;
    for (const auto& b : seg.blocks) {
      py::dict bd;
      bd["offset"] = b.offset;
      bd["size"] = b.size;
      bd["requested_size"] = b.requested;
      bd["state"] = b.allocated ? "active_allocated" : "inactive";
      blocks.append(bd);
    }
    py::dict sd;
    sd["device"] = device;
    sd["address"] = seg.address;
    sd["total_size"] = seg.size;
    sd["segment_type"] = seg.small ? "small" : "large";
    sd["blocks"] = blocks;
    out.append(sd);
  }
  return out;
}

py::dict duration_dict(const c10::CachingAllocator::DurationStat& s) {
  py::dict d;
  d["total"] = s.total;
  d["max"] = s.max;
  d["min"] = s.min;
  d["count"] = s.count;
  return d;
}

// Keys of torch.cuda.host_memory_stats (at::HostStats), plus num_record_event.
py::dict host_memory_stats() {
  const auto s = neuronsim::host_allocator().get_stats();
  py::dict d;
  d["active_requests"] = stat_dict(s.active_requests);
  d["active_bytes"] = stat_dict(s.active_bytes);
  d["allocations"] = stat_dict(s.allocations);
  d["allocated_bytes"] = stat_dict(s.allocated_bytes);
  d["host_alloc_time"] = duration_dict(s.host_alloc_time);
  d["host_free_time"] = duration_dict(s.host_free_time);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  d["num_record_event"] = neuronsim::host_allocator().num_record_event();
  return d;
}

// numpy dtype of each ScalarType, set once from Python (bfloat16 comes from ml_dtypes).
std::array<py::object, static_cast<size_t>(at::ScalarType::NumOptions)> g_numpy_dtypes;

// The engine's window onto HBM: a numpy array over a tensor's memory with its
// sizes and strides, holding a reference to the tensor so the memory stays alive.
py::array hbm_view(py::handle tensor_obj) {
  const at::Tensor& t = THPVariable_Unpack(tensor_obj.ptr());
  const py::object& dtype_obj = g_numpy_dtypes[static_cast<size_t>(t.scalar_type())];
  TORCH_CHECK(dtype_obj, "no numpy dtype registered for ", t.scalar_type());
  py::dtype dtype = py::reinterpret_borrow<py::dtype>(dtype_obj);
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end());
  if (t.numel() == 0) return py::array(dtype, shape);
  std::vector<py::ssize_t> strides;
  strides.reserve(shape.size());
  for (auto s : t.strides()) strides.push_back(s * static_cast<py::ssize_t>(t.element_size()));
  return py::array(dtype, shape, strides, t.data_ptr(), py::reinterpret_borrow<py::object>(tensor_obj));
}

at::Generator unwrap_generator(py::handle obj) {
  TORCH_CHECK(THPGenerator_Check(obj.ptr()), "expected a torch.Generator");
  return THPGenerator_Unwrap(obj.ptr());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "neuronsim C++ core: allocator, device runtime, metadata kernels";

  m.def("device_count", &neuronsim::device_count);
  m.def("set_device_count", &neuronsim::set_device_count);
  m.def("current_device", [] { return static_cast<int>(neuronsim::current_device()); });
  m.def("set_device", [](int i) { neuronsim::set_device(static_cast<c10::DeviceIndex>(i)); });
  m.def("exchange_device", [](int i) {
    return static_cast<int>(neuronsim::exchange_device(static_cast<c10::DeviceIndex>(i)));
  });
  m.def("context_created", [](int i) { return neuronsim::context_created(static_cast<c10::DeviceIndex>(i)); });

  m.def("set_hbm_capacity", [](size_t bytes) { allocator().set_capacity_all(bytes); });
  m.def("memory_stats", &memory_stats);
  m.def("memory_snapshot", &memory_snapshot);
  m.def("empty_cache", [](int device) { allocator().heap(device).empty_cache(); });
  m.def("reset_peak_stats", [](int device) { allocator().heap(device).reset_peak(); });
  m.def("reset_accumulated_stats", [](int device) { allocator().heap(device).reset_accumulated(); });
  m.def("check_invariants", [](int device) { return allocator().heap(device).check_invariants(); });
  m.def("round_size", &neuronsim::round_size);

  m.def("device_time_ns", [](int i) { return neuronsim::device_time_ns(static_cast<c10::DeviceIndex>(i)); });
  m.def("set_copy_model", &neuronsim::set_copy_model);
  m.def("copy_time_ns", &neuronsim::copy_time_ns, py::arg("bytes"), py::arg("host_side"), py::arg("pinned") = true);

  m.def("host_memory_stats", &host_memory_stats);
  m.def("host_empty_cache", [] { neuronsim::host_allocator().empty_cache(); });
  m.def("host_reset_peak_stats", [] { neuronsim::host_allocator().reset_peak_stats(); });
  m.def("host_reset_accumulated_stats", [] { neuronsim::host_allocator().reset_accumulated_stats(); });
  m.def("is_pinned_ptr", [](size_t address) { return neuronsim::is_pinned(reinterpret_cast<const void*>(address)); });
  m.def("advance_device_time", [](int i, int64_t ns) {
    neuronsim::advance_device_time(static_cast<c10::DeviceIndex>(i), ns);
  });

  m.def("default_generator", [](int i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(neuronsim::default_generator(static_cast<c10::DeviceIndex>(i))));
  });
  m.def("reserve_random", [](py::handle gen, uint64_t increment) {
    auto g = unwrap_generator(gen);
    TORCH_CHECK(g.device().is_privateuseone(), "expected a neuron generator, got one for ", g.device());
    return g.get<neuronsim::NeuronGenerator>()->reserve(increment);
  });

  m.def("set_synchronize_hook", [](py::object hook) {
    delete neuronsim::g_synchronize_hook;
    neuronsim::g_synchronize_hook = hook.is_none() ? nullptr : new py::object(std::move(hook));
  }, "Register fn(reason: str, device: int), called (GIL held) at every synchronisation point of the guard.");
  m.def("set_cast_hook", &neuronsim::set_cast_hook,
        "Register the Python kernel copy_ calls for dtype/conjugate conversions between neuron tensors.");
  m.def("set_numpy_dtype", [](py::object torch_dtype, py::object numpy_dtype) {
    auto* d = reinterpret_cast<THPDtype*>(torch_dtype.ptr());
    g_numpy_dtypes[static_cast<size_t>(d->scalar_type)] = numpy_dtype;
  });
  m.def("hbm_view", &hbm_view, "A numpy array aliasing a tensor's memory (zero-copy).");
  m.def("host_view", &neuronsim::host_view,
        "A CPU tensor aliasing a neuron tensor's memory (zero-copy; keeps the storage alive).");
}
