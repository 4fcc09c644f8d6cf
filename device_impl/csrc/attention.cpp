// Which scaled_dot_product_attention backend neuron runs (the _fused_sdp_choice stub and op).
//
// ATen's scaled_dot_product_attention asks _fused_sdp_choice_stub for the device's backend; a
// PrivateUse1 backend's own fused kernel is the "overrideable" one,
// _scaled_dot_product_fused_attention_overrideable (and its backward), which device_impl registers
// as native tile kernels (kernels/attention.py). Without this stub the composite took the math path,
// and torch._fused_sdp_choice reached the CPU fallback and answered FLASH (CPU's choice).
//
// OVERRIDEABLE for what the tile kernel serves: 4-D float32/bfloat16/float16 inputs of one
// dtype and batch, a head dim the same for query and key, key/value heads equal and dividing the
// query heads (only with enable_gqa when they differ), a bool mask or one of the inputs' dtype.
// Anything else takes MATH, whose ops run on the device and raise PyTorch's own errors for bad input.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

namespace neuronsim {
namespace {

bool fused_dtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half;
}

bool overrideable_serves(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, bool enable_gqa) {
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  // 4-D only, as CUDA's flash/efficient backends: PyTorch's meta function for the overrideable op
  // (torch/_meta_registrations.py) reads four strides, so a 3-D call answered OVERRIDEABLE could not be
  // traced by torch.compile. 3-D inputs take MATH (matmul and softmax kernels on the device).
  const auto dim = q.dim();
  if (dim != 4 || k.dim() != dim || v.dim() != dim) return false;
  if (!fused_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    return false;
  // Sizes through sym_size/sym_numel: Dynamo asks this choice while tracing with fake tensors, whose sizes are
  // symbolic after an automatic-dynamic recompile (a second sequence length); size() and numel() throw there.
  // A SymInt comparison answers for the traced sizes and guards on it.
  if (q.sym_size(-1) != k.sym_size(-1) || k.sym_size(-2) != v.sym_size(-2)) return false;
  if (k.sym_size(0) != q.sym_size(0) || v.sym_size(0) != q.sym_size(0)) return false;
  const c10::SymInt hq = q.sym_size(-3), hk = k.sym_size(-3);
  if (v.sym_size(-3) != hk || hk == 0) return false;
  if (hq != hk && (!enable_gqa || hq % hk != 0)) return false;
  if (q.sym_numel() == 0 || k.sym_numel() == 0) return false;
  if (mask.has_value() && mask->defined()) {
    const auto m = mask->scalar_type();
    if (m != c10::ScalarType::Bool && m != q.scalar_type()) return false;
    if (mask->dim() > dim) return false;
  }
  return true;
}

int64_t choose(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
               const std::optional<at::Tensor>& attn_mask, double /*dropout_p*/, bool /*is_causal*/,
               std::optional<double> /*scale*/, bool enable_gqa) {
  const auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && overrideable_serves(query, key, value, attn_mask, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  TORCH_CHECK(ctx.userEnabledMathSDP(),
              "No available kernel for scaled_dot_product_attention on neuron: the overrideable (fused) backend "
              "does not serve these inputs or is disabled, and the math backend is disabled. Enable one with "
              "torch.nn.attention.sdpa_kernel([SDPBackend.OVERRIDEABLE, SDPBackend.MATH]).");
  return static_cast<int64_t>(at::SDPBackend::math);
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  return choose(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", fused_sdp_choice); }

}  // namespace
}  // namespace neuronsim

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuronsim::choose)
}
