// The aten kernels that must manipulate TensorImpl/Storage directly, and the
// copies between host memory and simulated HBM (the DMA of this device).
// Everything that computes is registered from Python (device_impl.dispatch).
#include "allocator.h"
#include "device.h"
#include "host_allocator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <cstring>

namespace neuronsim {

namespace {

constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

void check_factory(const c10::Device& device, std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(device.is_privateuseone(), "neuron factory called for device ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "neuron supports only torch.strided tensors; got layout ", c10::layout_or_default(layout),
              ". Convert to dense (.to_dense()) before moving to neuron.");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "pin_memory=True applies to CPU tensors only; create the tensor on CPU and pin it there.");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const auto dev = c10::device_or_default(device);
  check_factory(dev, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_generic(size, &allocator(), kNeuronKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const auto dev = c10::device_or_default(device);
  check_factory(dev, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_strided_generic(size, stride, &allocator(), kNeuronKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  // Grows the storage through the storage's own allocator (ours), keeping
  // the old bytes, exactly as CPU resize_ does.
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

// A CPU tensor that aliases a tensor's memory (its storage stays alive for as
// long as the alias does). Used for host<->device transfers and by the engine.
at::Tensor host_alias(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  auto storage = t.storage();
  auto options = t.options().device(at::kCPU);
  if (storage.data() == nullptr) {
    return at::empty_strided(t.sizes(), t.strides(), options);
  }
  auto alias = at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [storage](void*) mutable { storage = c10::Storage(); }, options);
  alias._set_conj(t.is_conj());
  alias._set_neg(t.is_neg());
  return alias;
}

// Set from Python (device_impl.kernels.copy): converts src into dst on one core.
pybind11::object* g_cast_hook = nullptr;

void run_cast_hook(const at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK(g_cast_hook != nullptr, "neuron: the device cast kernel is not registered (import device_impl)");
  pybind11::gil_scoped_acquire gil;
  (*g_cast_hook)(dst, src);
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_non_overlapping_and_dense() && a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg();
}

// Copies `src` into `dst` where at least one side is in simulated HBM.
// Same dtype and layout: one memcpy of the dense span (a DMA descriptor).
// Otherwise the host stages a strided/casting copy.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(src.defined() && dst.defined(), "neuron copy: undefined tensor");
  TORCH_CHECK(src.device().is_cpu() || src.device().is_privateuseone(), "neuron copy: cannot copy from ", src.device(),
              "; move the tensor to cpu first.");
  TORCH_CHECK(dst.device().is_cpu() || dst.device().is_privateuseone(), "neuron copy: cannot copy to ", dst.device(),
              "; move the tensor to cpu first.");
  if (dst.numel() == 0) return dst;
  if (same_layout(src, dst) && !dst.is_conj() && !dst.is_neg()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), dst.numel() * dst.element_size());
  } else {
    at::Tensor dst_host = host_alias(dst);
    at::native::copy_(dst_host, host_alias(src), false);
  }
  // The transfer occupies the device side's DMA queues for its modeled time (bytes over the link),
  // not the host's wall time for the memcpy: simulated time must not depend on how busy this machine is.
  // A pinned host buffer is read (written) by the DMA directly; a pageable one is staged through a
  // bounce buffer first (copy_time_ns). A non_blocking copy with a pinned buffer is ordered on the device
  // side's current stream: the host allocator records that use, as CUDA's does, so the block is tied to
  // the stream's work (reuse is safe at once here because the simulated transfer completes inside copy_).
  const bool host_side = src.device().is_cpu() || dst.device().is_cpu() || src.device() != dst.device();
  const at::Tensor& host = src.device().is_cpu() ? src : dst;
  const bool pinned = !host.device().is_cpu() || is_pinned(host.storage().data());
  const int64_t bytes = static_cast<int64_t>(dst.numel()) * static_cast<int64_t>(dst.element_size());
  const auto device = dst.is_privateuseone() ? dst.device().index() : src.device().index();
  if (non_blocking && host.device().is_cpu() && pinned) {
    host_allocator().record_event(host.storage().mutable_data(), host.storage().data_ptr().get_context(),
                                  current_stream(device));
  }
  advance_device_time(device, copy_time_ns(bytes, host_side, pinned));
  return dst;
}

bool needs_cast(const at::Tensor& dst, const at::Tensor& src) {
  return dst.dtype() != src.dtype() || dst.is_conj() != src.is_conj() || dst.is_neg() != src.is_neg();
}

// copy_ moves bytes here and leaves every conversion (dtype casts, conjugate
// and negative views) to the engine through the cast hook, so the only
// arithmetic of a copy happens in a neuron kernel. The conversion always runs
// between two tensors on one core; a copy that also crosses devices is staged
// through a temporary there. (Registered directly rather than left to
// at::native::copy_, whose redispatch to _copy_from would send conjugate views
// through the Conjugate fallback: clone -> copy_ -> _copy_from, forever.)
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  // a tensor copied onto itself moves nothing, as at::native::copy_ returns early (AOTAutograd's copy of an
  // in-place op's result into its input, where the compiled program wrote the result there already)
  if (self.numel() == 0 || self.is_same(src)) return self;
  if (!needs_cast(self, src)) {
    copy_from(src, self, non_blocking);
    return self;
  }
  if (self.is_privateuseone() && src.is_privateuseone() && self.device() == src.device()) {
    run_cast_hook(self, src);
  } else if (self.is_privateuseone()) {
    at::Tensor staged = at::empty_strided(src.sizes(), src.strides(), src.options().device(self.device()));
    copy_from(src, staged, non_blocking);
    run_cast_hook(self, staged);
  } else {
    at::Tensor staged = at::empty_strided(self.sizes(), self.strides(), self.options().device(src.device()));
    run_cast_hook(staged, src);
    copy_from(staged, self, non_blocking);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  const c10::DeviceGuard guard(dst.device());
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

// The element at the tensor's data pointer, as CPU's and CUDA's kernels read it: item() checks for one element above
// the kernel, a direct call of a longer tensor gets its first element. (An empty tensor has none: an error here,
// where CPU reads past its storage.)
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "a Tensor with 0 elements cannot be converted to Scalar");
  return at::native::_local_scalar_dense_cpu(host_alias(self));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

// Quantized tensors: the device has no quantized kernels (no QuantizedPrivateUse1 implementations), so
// a quantized neuron tensor is refused where one would be created -- moving a quantized tensor to
// neuron, quantizing a neuron tensor, or empty(dtype=torch.qint8) -- with the fix named. Other ops on
// that key get the generic layout refusal (device_impl/dispatch).
void refuse_quantized(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "neuron has no quantized tensors (", op.schema().name(),
      " would create one). Dequantize on CPU and move the float tensor (q.dequantize().to('neuron')), "
      "quantize after moving back to CPU, or run in bfloat16 on neuron (model.to(torch.bfloat16)), the "
      "device's native low-precision type.");
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  for (const char* name : {"empty.memory_format", "empty_quantized", "_empty_affine_quantized",
                           "_empty_per_channel_affine_quantized", "empty_strided"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
  }
}

}  // namespace

at::Tensor host_view(const at::Tensor& t) { return host_alias(t); }

void set_cast_hook(pybind11::object hook) {
  delete g_cast_hook;
  g_cast_hook = new pybind11::object(std::move(hook));  // intentionally leaked: lives until exit
}

}  // namespace neuronsim
