#include "allocator.h"

#include "device.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

namespace neuronsim {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

namespace {

std::atomic<size_t> g_default_capacity{kDefaultCapacity};

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string format_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%zu B", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

// Updates the aggregate and the per-pool entry of a stat array.
template <typename F>
void for_pool(StatArray& a, bool small, F f) {
  f(a[static_cast<size_t>(StatType::AGGREGATE)]);
  f(a[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)]);
}

bool is_split(const Block* b) { return b->prev != nullptr || b->next != nullptr; }

}  // namespace

size_t round_size(size_t nbytes) {
  if (nbytes <= kMinBlockSize) return kMinBlockSize;
  if (nbytes >= kSizeClassLimit) return align_up(nbytes, kLargeRounding);
  // Quarter-power-of-two classes: p, 1.25p, 1.5p, 1.75p, 2p (at most 25% waste).
  size_t p = 1;
  while (p * 2 < nbytes) p *= 2;
  const size_t step = std::max<size_t>(p / 4, 1);
  return align_up(align_up(nbytes, step), kMinBlockSize);
}

DeviceHeap::DeviceHeap(c10::DeviceIndex device)
    : device_(device), capacity_(g_default_capacity.load()) {}

void DeviceHeap::set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = bytes;
}

size_t DeviceHeap::capacity() {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

bool DeviceHeap::fits(size_t segment_bytes) const {
  const auto reserved = stats_.reserved_bytes[0].current;
  return static_cast<size_t>(reserved) + segment_bytes <= capacity_;
}

void DeviceHeap::insert_free(Block* b) {
  pool_of(b->small).insert(b);
  if (is_split(b)) {
    for_pool(stats_.inactive_split, b->small, [](Stat& s) { s.increase(1); });
    for_pool(stats_.inactive_split_bytes, b->small, [&](Stat& s) { s.increase(b->size); });
  }
}

void DeviceHeap::erase_free(Block* b) {
  pool_of(b->small).erase(b);
  if (is_split(b)) {
    for_pool(stats_.inactive_split, b->small, [](Stat& s) { s.decrease(1); });
    for_pool(stats_.inactive_split_bytes, b->small, [&](Stat& s) { s.decrease(b->size); });
  }
}

Block* DeviceHeap::take_free_block(bool small, size_t size) {
  Pool& pool = pool_of(small);
  Block key;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  erase_free(b);
  return b;
}

Block* DeviceHeap::new_segment(size_t size, bool small) {
  // MAP_NORESERVE: host pages are committed only when a kernel touches them,
  // so a 16 GiB simulated HBM costs nothing until it is used.
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  auto* seg = new Segment{static_cast<char*>(base), size, small, nullptr};
  auto* b = new Block;
  b->device = device_;
  b->small = small;
  b->size = size;
  b->ptr = seg->base;
  b->segment = seg;
  seg->head = b;
  segments_.insert(seg);
  for_pool(stats_.segment, small, [](Stat& s) { s.increase(1); });
  for_pool(stats_.reserved_bytes, small, [&](Stat& s) { s.increase(size); });
  stats_.num_device_alloc += 1;
  return b;
}

void DeviceHeap::release_segment(Segment* seg) {
  Block* b = seg->head;
  erase_free(b);
  for_pool(stats_.segment, seg->small, [](Stat& s) { s.decrease(1); });
  for_pool(stats_.reserved_bytes, seg->small, [&](Stat& s) { s.decrease(seg->size); });
  stats_.num_device_free += 1;
  munmap(seg->base, seg->size);
  segments_.erase(seg);
  delete b;
  delete seg;
}

void DeviceHeap::release_free_segments() {
  std::vector<Segment*> idle;
  for (Segment* seg : segments_) {
    if (!seg->head->allocated && seg->head->next == nullptr) idle.push_back(seg);
  }
  for (Segment* seg : idle) release_segment(seg);
}

Block* DeviceHeap::split(Block* b, size_t size) {
  const size_t remaining = b->size - size;
  // Small blocks split down to the minimum class; large blocks only when the
  // rest is itself large, so the large pool does not fill with slivers.
  const bool worth = b->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!worth) return b;
  auto* rest = new Block;
  rest->device = device_;
  rest->small = b->small;
  rest->size = remaining;
  rest->ptr = b->ptr + size;
  rest->segment = b->segment;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  insert_free(rest);
  return b;
}

[[noreturn]] void DeviceHeap::raise_oom(size_t requested, size_t rounded) {
  stats_.num_ooms += 1;
  const size_t allocated = stats_.allocated_bytes[0].current;
  const size_t reserved = stats_.reserved_bytes[0].current;
  const size_t free_bytes = capacity_ > reserved ? capacity_ - reserved : 0;
  TORCH_CHECK_WITH(
      OutOfMemoryError, false, "Neuron out of memory. Tried to allocate ", format_bytes(requested),
      " (", format_bytes(rounded), " after rounding) on neuron:", static_cast<int>(device_),
      ". Simulated HBM capacity ", format_bytes(capacity_), "; ", format_bytes(allocated),
      " allocated by tensors; ", format_bytes(reserved), " reserved by the caching allocator; ",
      format_bytes(free_bytes), " free. Free tensors you no longer need, call "
      "torch.neuron.empty_cache(), use smaller batches, or raise the simulated capacity "
      "with NEURON_HBM_BYTES.");
}

Block* DeviceHeap::allocate(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t rounded = round_size(nbytes);
  const bool small = rounded <= kSmallSize;
  Block* b = take_free_block(small, rounded);
  if (b == nullptr) {
    size_t seg_bytes = small ? kSmallSegment : (rounded < kMinLargeAlloc ? kLargeSegment : rounded);
    if (!fits(seg_bytes)) {
      // Retry after returning cached segments, then with a segment exactly
      // the size of the request, before giving up.
      stats_.num_alloc_retries += 1;
      release_free_segments();
      if (!fits(seg_bytes)) seg_bytes = small ? kSmallSegment : rounded;
      if (!fits(seg_bytes)) raise_oom(nbytes, rounded);
    }
    b = new_segment(seg_bytes, small);
    if (b == nullptr) raise_oom(nbytes, rounded);
  }
  b = split(b, rounded);
  b->allocated = true;
  b->requested = nbytes;
  for_pool(stats_.allocation, small, [](Stat& s) { s.increase(1); });
  for_pool(stats_.active, small, [](Stat& s) { s.increase(1); });
  for_pool(stats_.allocated_bytes, small, [&](Stat& s) { s.increase(b->size); });
  for_pool(stats_.active_bytes, small, [&](Stat& s) { s.increase(b->size); });
  for_pool(stats_.requested_bytes, small, [&](Stat& s) { s.increase(nbytes); });
  return b;
}

void DeviceHeap::free(Block* b) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_INTERNAL_ASSERT(b->allocated, "neuron allocator: double free");
  const bool small = b->small;
  for_pool(stats_.allocation, small, [](Stat& s) { s.decrease(1); });
  for_pool(stats_.active, small, [](Stat& s) { s.decrease(1); });
  for_pool(stats_.allocated_bytes, small, [&](Stat& s) { s.decrease(b->size); });
  for_pool(stats_.active_bytes, small, [&](Stat& s) { s.decrease(b->size); });
  for_pool(stats_.requested_bytes, small, [&](Stat& s) { s.decrease(b->requested); });
  b->allocated = false;
  b->requested = 0;
  // Coalesce with free neighbours so the segment can be released whole.
  if (b->prev && !b->prev->allocated) {
    Block* p = b->prev;
    erase_free(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next && !b->next->allocated) {
    Block* n = b->next;
    erase_free(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  insert_free(b);
}

void DeviceHeap::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_segments();
}

c10::CachingDeviceAllocator::DeviceStats DeviceHeap::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceHeap::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* arr : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                    &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                    &stats_.inactive_split_bytes, &stats_.requested_bytes}) {
    for (auto& s : *arr) s.reset_peak();
  }
}

void DeviceHeap::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* arr : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                    &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                    &stats_.inactive_split_bytes, &stats_.requested_bytes}) {
    for (auto& s : *arr) s.reset_accumulated();
  }
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

bool DeviceHeap::owns(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* p = static_cast<const char*>(ptr);
  for (Segment* seg : segments_) {
    if (p >= seg->base && p < seg->base + seg->size) return true;
  }
  return false;
}

std::vector<std::string> DeviceHeap::check_invariants() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> errors;
  auto fail = [&](const std::string& msg) { errors.push_back(msg); };
  int64_t reserved = 0, allocated = 0, requested = 0, n_alloc = 0, n_free = 0;
  int64_t reserved_small = 0, allocated_small = 0;
  for (Segment* seg : segments_) {
    reserved += seg->size;
    if (seg->small) reserved_small += seg->size;
    size_t covered = 0;
    const Block* prev = nullptr;
    for (Block* b = seg->head; b; b = b->next) {
      if (b->prev != prev) fail("block links broken");
      if (b->ptr != seg->base + covered) fail("block does not start where its predecessor ends");
      if (b->segment != seg || b->small != seg->small) fail("block points at the wrong segment");
      if (b->size < kMinBlockSize || b->size % kMinBlockSize != 0) fail("block size not a size class");
      covered += b->size;
      if (b->allocated) {
        ++n_alloc;
        allocated += b->size;
        requested += b->requested;
        if (seg->small) allocated_small += b->size;
        if (b->requested > b->size) fail("block smaller than its request");
      } else {
        ++n_free;
        if (!pool_of(b->small).count(b)) fail("free block missing from its pool");
        if (prev && !prev->allocated) fail("two adjacent free blocks were not coalesced");
      }
      prev = b;
    }
    if (covered != seg->size) fail("blocks do not cover their segment");
  }
  if (static_cast<int64_t>(small_free_.size() + large_free_.size()) != n_free)
    fail("pools hold blocks that are not in any segment");
  const auto& st = stats_;
  if (st.reserved_bytes[0].current != reserved) fail("reserved_bytes stat disagrees with segments");
  if (st.allocated_bytes[0].current != allocated) fail("allocated_bytes stat disagrees with blocks");
  if (st.requested_bytes[0].current != requested) fail("requested_bytes stat disagrees with blocks");
  if (st.allocation[0].current != n_alloc) fail("allocation count disagrees with blocks");
  if (st.reserved_bytes[1].current != reserved_small) fail("small-pool reserved stat wrong");
  if (st.allocated_bytes[1].current != allocated_small) fail("small-pool allocated stat wrong");
  if (!(reserved >= allocated && allocated >= st.active_bytes[0].current &&
        st.active_bytes[0].current >= requested))
    fail("reserved >= allocated >= active >= requested violated");
  if (static_cast<size_t>(reserved) > capacity_) fail("reserved exceeds capacity");
  return errors;
}

std::vector<DeviceHeap::SegmentView> DeviceHeap::snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SegmentView> out;
  for (Segment* seg : segments_) {
    SegmentView v{reinterpret_cast<size_t>(seg->base), seg->size, seg->small, {}};
    for (Block* b = seg->head; b; b = b->next) {
      v.blocks.push_back({static_cast<size_t>(b->ptr - seg->base), b->size, b->requested, b->allocated});
    }
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const SegmentView& a, const SegmentView& b) { return a.address < b.address; });
  return out;
}

// ---------------------------------------------------------------------------

namespace {
void delete_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  allocator().heap(b->device).free(b);
}
}  // namespace

DeviceHeap& NeuronAllocator::heap(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "neuron allocator: bad device index ", static_cast<int>(device));
  // Heaps are never destroyed: tensors may be freed during interpreter exit.
  std::call_once(once_[device], [&] { heaps_[device].store(new DeviceHeap(device)); });
  return *heaps_[device].load();
}

c10::DataPtr NeuronAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  mark_context_created(device);
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, dev);
  Block* b = heap(device).allocate(nbytes);
  return c10::DataPtr(b->ptr, b, &delete_block, dev);
}

c10::DeleterFnPtr NeuronAllocator::raw_deleter() const { return &delete_block; }

void NeuronAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

void NeuronAllocator::emptyCache(c10::MempoolId_t) {
  for (int d = 0; d < device_count(); ++d) heap(d).empty_cache();
}

c10::CachingDeviceAllocator::DeviceStats NeuronAllocator::getDeviceStats(c10::DeviceIndex device) {
  return heap(device).stats();
}

void NeuronAllocator::resetAccumulatedStats(c10::DeviceIndex device) { heap(device).reset_accumulated(); }

void NeuronAllocator::resetPeakStats(c10::DeviceIndex device) { heap(device).reset_peak(); }

std::pair<size_t, size_t> NeuronAllocator::getMemoryInfo(c10::DeviceIndex device) {
  auto& h = heap(device);
  const size_t cap = h.capacity();
  const size_t reserved = h.stats().reserved_bytes[0].current;
  return {cap > reserved ? cap - reserved : 0, cap};
}

c10::DeviceIndex NeuronAllocator::device_of(const void* ptr) {
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceHeap* h = heaps_[d].load();
    if (h != nullptr && h->owns(ptr)) return static_cast<c10::DeviceIndex>(d);
  }
  return -1;
}

void NeuronAllocator::set_capacity_all(size_t bytes) {
  g_default_capacity.store(bytes);
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceHeap* h = heaps_[d].load();
    if (h != nullptr) h->set_capacity(bytes);
  }
}

NeuronAllocator& allocator() {
  static NeuronAllocator* instance = new NeuronAllocator();
  return *instance;
}

}  // namespace neuronsim
