// Pinned (page-locked) host memory for the neuron device: the host allocator
// PyTorch asks for when a CPU tensor is pinned (Tensor.pin_memory(),
// DataLoader(pin_memory=True)) and whose pointers is_pinned() recognises.
//
// Why it exists: a DMA engine can read pinned host pages directly, so a copy
// from them crosses PCIe once and may run asynchronously; a copy from pageable
// memory is first staged by the host into a pinned bounce buffer. The copy
// model (device.h: copy_time_ns) charges the two differently, and a
// non_blocking copy from a block here is recorded on the current stream.
//
// The policy is CUDA's caching host allocator's: requests are rounded up to a
// power of two, freed blocks are cached by size and reused, empty_cache()
// returns them to the system. Stats are at::HostStats (what
// torch.cuda.host_memory_stats reports), plus the count of stream uses.
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace neuronsim {

struct HostBlock {
  char* ptr = nullptr;
  size_t size = 0;       // rounded size (the bytes reserved)
  size_t requested = 0;  // what the caller asked for
  bool allocated = false;
  // Stream uses recorded by non_blocking copies (record_event). A simulated transfer has
  // completed when copy_ returns, so a freed block is reusable at once; on hardware the
  // allocator would wait for an event on each of these streams first.
  int64_t stream_uses = 0;
};

class NeuronHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override;
  at::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

  // True when `ptr` points into a live or cached pinned block (is_pinned()).
  bool owns(const void* ptr);
  // How many non_blocking copies recorded a stream use on a pinned block.
  int64_t num_record_event();
  void release(void* ctx);

 private:
  HostBlock* block_containing(const void* ptr);  // caller holds mutex_
  std::mutex mutex_;
  std::map<char*, HostBlock*> blocks_;                  // every block, by address
  std::map<size_t, std::vector<HostBlock*>> free_;      // cached blocks by rounded size
  at::HostStats stats_;
  int64_t num_record_event_ = 0;
};

NeuronHostAllocator& host_allocator();

// Whether a CPU tensor's memory is pinned by this allocator.
bool is_pinned(const void* ptr);

}  // namespace neuronsim
