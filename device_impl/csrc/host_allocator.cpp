#include "host_allocator.h"

#include <c10/util/Exception.h>
#include <c10/util/llvmMathExtras.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace neuronsim {

namespace {

constexpr size_t kHostAlignment = 64;  // c10's CPU alignment: pinned tensors are ordinary CPU tensors

void delete_pinned(void* ctx) { host_allocator().release(ctx); }

int64_t micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

at::DataPtr NeuronHostAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return {nullptr, nullptr, &delete_pinned, at::Device(at::kCPU)};
  const size_t rounded = std::max<size_t>(c10::llvm::PowerOf2Ceil(nbytes), kHostAlignment);
  std::lock_guard<std::mutex> lock(mutex_);
  HostBlock* block = nullptr;
  auto it = free_.find(rounded);
  if (it != free_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
  } else {
    const auto start = std::chrono::steady_clock::now();
    void* ptr = nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&ptr, kHostAlignment, rounded) == 0 && ptr != nullptr,
                     "neuron: could not pin ", nbytes, " bytes of host memory (", rounded,
                     " after rounding to a power of two). Free pinned tensors or call "
                     "torch.neuron.empty_host_cache().");
    block = new HostBlock{static_cast<char*>(ptr), rounded};
    blocks_[block->ptr] = block;
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(rounded);
    stats_.num_host_alloc += 1;
    stats_.host_alloc_time.increase(micros_since(start));
    const auto bucket = static_cast<size_t>(c10::llvm::Log2_64_Ceil(rounded));
    if (bucket < stats_.bucket_allocation.size()) stats_.bucket_allocation[bucket] += 1;
  }
  block->allocated = true;
  block->requested = nbytes;
  stats_.active_requests.increase(1);
  stats_.active_bytes.increase(block->size);
  return {block->ptr, block, &delete_pinned, at::Device(at::kCPU)};
}

void NeuronHostAllocator::release(void* ctx) {
  if (ctx == nullptr) return;
  auto* block = static_cast<HostBlock*>(ctx);
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_INTERNAL_ASSERT(block->allocated, "neuron host allocator: double free of a pinned block");
  block->allocated = false;
  block->stream_uses = 0;
  stats_.active_requests.decrease(1);
  stats_.active_bytes.decrease(block->size);
  free_[block->size].push_back(block);
}

at::DeleterFnPtr NeuronHostAllocator::raw_deleter() const { return &delete_pinned; }

void NeuronHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

HostBlock* NeuronHostAllocator::block_containing(const void* ptr) {
  if (ptr == nullptr) return nullptr;
  auto* p = static_cast<char*>(const_cast<void*>(ptr));
  auto it = blocks_.upper_bound(p);  // first block starting after p
  if (it == blocks_.begin()) return nullptr;
  --it;
  HostBlock* block = it->second;
  return block->allocated && p < block->ptr + block->size ? block : nullptr;
}

// Looked up by address, not ctx: a pinned pointer may reach here through a tensor whose DataPtr
// context is not ours (from_blob over pinned memory).
bool NeuronHostAllocator::record_event(void* ptr, void* /*ctx*/, c10::Stream /*stream*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  HostBlock* block = block_containing(ptr);
  if (block == nullptr) return false;
  block->stream_uses += 1;
  num_record_event_ += 1;
  return true;
}

void NeuronHostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, list] : free_) {
    for (HostBlock* block : list) {
      const auto start = std::chrono::steady_clock::now();
      std::free(block->ptr);
      stats_.host_free_time.increase(micros_since(start));
      stats_.num_host_free += 1;
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(block->size);
      blocks_.erase(block->ptr);
      delete block;
    }
  }
  free_.clear();
}

at::HostStats NeuronHostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void NeuronHostAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* s : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
    s->reset_accumulated();
  }
  stats_.host_alloc_time.reset_accumulated();
  stats_.host_free_time.reset_accumulated();
  stats_.num_host_alloc = 0;
  stats_.num_host_free = 0;
  num_record_event_ = 0;
}

void NeuronHostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* s : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
    s->reset_peak();
  }
  stats_.host_alloc_time.reset_peak();
  stats_.host_free_time.reset_peak();
}

bool NeuronHostAllocator::owns(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  return block_containing(ptr) != nullptr;
}

int64_t NeuronHostAllocator::num_record_event() {
  std::lock_guard<std::mutex> lock(mutex_);
  return num_record_event_;
}

NeuronHostAllocator& host_allocator() {
  static NeuronHostAllocator* instance = new NeuronHostAllocator();  // leaked: pinned tensors may outlive statics
  return *instance;
}

bool is_pinned(const void* ptr) { return host_allocator().owns(ptr); }

namespace {
struct RegisterHostAllocator {
  RegisterHostAllocator() { at::setHostAllocator(at::kPrivateUse1, &host_allocator()); }
};
RegisterHostAllocator g_register_host_allocator;
}  // namespace

}  // namespace neuronsim
