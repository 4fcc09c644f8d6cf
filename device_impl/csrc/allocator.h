// Simulated HBM: a caching segment allocator for the neuron device.
//
// Why a real allocator and not malloc per tensor: users of an accelerator
// read memory_reserved()/memory_allocated() to size batches, and an OOM on
// Trainium is decided by what the caching allocator has reserved, not by
// what live tensors hold. The policy follows the one TorchNeuron documents
// (and CUDA's caching allocator): a small pool for blocks up to 1 MiB carved
// from 2 MiB segments, a large pool above, size classes below 16 MiB,
// best-fit reuse with block splitting and coalescing on free.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace neuronsim {

constexpr size_t kMinBlockSize = 256;             // smallest size class
constexpr size_t kSmallSize = 1 << 20;            // <= 1 MiB: small pool
constexpr size_t kSmallSegment = 2 << 20;         // small-pool segment
constexpr size_t kLargeSegment = 20 << 20;        // segment for mid-size requests
constexpr size_t kMinLargeAlloc = 10 << 20;       // above: a segment of its own
constexpr size_t kSizeClassLimit = 16 << 20;      // below: quarter-power-of-two classes
constexpr size_t kLargeRounding = 2 << 20;        // above the limit: 2 MiB multiples
constexpr size_t kDefaultCapacity = 16ull << 30;  // half a Trn1 chip's 32 GiB
constexpr int kMaxDevices = 64;

struct Segment;

struct Block {
  c10::DeviceIndex device = 0;
  bool small = false;
  bool allocated = false;
  size_t size = 0;       // bytes this block spans
  size_t requested = 0;  // bytes the caller asked for (allocated blocks)
  char* ptr = nullptr;
  Block* prev = nullptr;  // neighbours inside the segment, by address
  Block* next = nullptr;
  Segment* segment = nullptr;
};

struct Segment {
  char* base = nullptr;
  size_t size = 0;
  bool small = false;
  Block* head = nullptr;
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

// Rounds a request to the block size the allocator hands out.
size_t round_size(size_t nbytes);

// All state of one device's HBM; every public member takes the lock.
class DeviceHeap {
 public:
  explicit DeviceHeap(c10::DeviceIndex device);

  Block* allocate(size_t nbytes);
  void free(Block* block);
  void empty_cache();
  void set_capacity(size_t bytes);
  size_t capacity();
  c10::CachingDeviceAllocator::DeviceStats stats();
  void reset_peak();
  void reset_accumulated();
  bool owns(const void* ptr);
  // Walks every segment and block; returns a description of each broken
  // invariant (empty when the heap is consistent).
  std::vector<std::string> check_invariants();
  // One entry per segment: (address, size, small, [(offset, size, requested, allocated)]).
  struct BlockView {
    size_t offset, size, requested;
    bool allocated;
  };
  struct SegmentView {
    size_t address, size;
    bool small;
    std::vector<BlockView> blocks;
  };
  std::vector<SegmentView> snapshot();

 private:
  using Pool = std::set<Block*, BySizeThenAddress>;
  Pool& pool_of(bool small) { return small ? small_free_ : large_free_; }
  Block* take_free_block(bool small, size_t size);
  Block* new_segment(size_t size, bool small);
  bool fits(size_t segment_bytes) const;
  void release_free_segments();
  void release_segment(Segment* segment);
  void insert_free(Block* block);
  void erase_free(Block* block);
  Block* split(Block* block, size_t size);
  [[noreturn]] void raise_oom(size_t requested, size_t rounded);

  c10::DeviceIndex device_;
  std::mutex mutex_;
  size_t capacity_ = kDefaultCapacity;
  Pool small_free_;
  Pool large_free_;
  std::unordered_set<Segment*> segments_;
  c10::CachingDeviceAllocator::DeviceStats stats_;
};

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  DeviceHeap& heap(c10::DeviceIndex device);
  // Device owning a pointer into simulated HBM, or -1.
  c10::DeviceIndex device_of(const void* ptr);
  void set_capacity_all(size_t bytes);

 private:
  std::once_flag once_[kMaxDevices];
  std::atomic<DeviceHeap*> heaps_[kMaxDevices] = {};
};

NeuronAllocator& allocator();

}  // namespace neuronsim
