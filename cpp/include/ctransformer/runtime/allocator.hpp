// The allocator behind every tensor buffer (ct::Array): a cache of freed blocks, by size class.
//
// A training step allocates and frees the same buffers every step. From the system, a fresh
// 13 MB buffer costs ~3300 page faults (2-3 us per 4 KiB page, docs/DESIGN.md); from this cache it costs
// a lock and a vector pop. Blocks are 64-byte aligned (whole AVX-512 vectors); blocks of 2 MiB and
// more are asked to be backed by transparent huge pages, so even their first use faults 512x less.
//
// Size classes: multiples of 64 bytes up to 4 KiB, then 8 classes per power of two (at most 12.5%
// rounding). The cache holds at most `cache_limit()` bytes (default 1 GiB, or the environment
// variable CTRANSFORMER_CACHE_LIMIT_MB); blocks freed beyond it go back to the system. When a
// new block must come from the system and live + cached + new would exceed the most bytes ever
// live at once plus 1/16, cached blocks of other sizes are released first: the cache raises the
// peak footprint at most 1/16 above the peak of live tensors.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace ct {

// The machine's physical memory in bytes (0 where the system does not say). No single buffer larger
// than this can be used, so asking for one fails at once with ct::MemoryError instead of
// overcommitting and being killed (or page-faulting for minutes) later.
std::size_t physical_memory_bytes();
// Throws ct::MemoryError naming `what` when `bytes` exceeds the physical memory.
void check_fits_in_memory(std::size_t bytes, const std::string& what);

namespace detail {
// n * size, or ct::MemoryError when the product does not fit in 64 bits.
std::size_t bytes_of(std::size_t n, std::size_t size);
void* cached_alloc(std::size_t bytes);
void cached_free(void* p, std::size_t bytes) noexcept;
}  // namespace detail

// A buffer of n T's from the cache, uninitialised (a std::vector would zero-fill it, and a fresh buffer from the
// system page-faults on first use): for working copies that are written in full before they are read.
template <class T>
struct CachedDelete {
    std::size_t count = 0;
    void operator()(T* p) const noexcept { detail::cached_free(p, count * sizeof(T)); }
};
template <class T>
using CachedArray = std::unique_ptr<T[], CachedDelete<T>>;
template <class T>
CachedArray<T> cached_array(std::size_t n) {
    return CachedArray<T>(static_cast<T*>(detail::cached_alloc(detail::bytes_of(n, sizeof(T)))), CachedDelete<T>{n});
}

template <class T>
struct CachingAllocator {
    using value_type = T;
    CachingAllocator() noexcept = default;
    template <class U>
    CachingAllocator(const CachingAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) { return static_cast<T*>(detail::cached_alloc(detail::bytes_of(n, sizeof(T)))); }
    void deallocate(T* p, std::size_t n) noexcept { detail::cached_free(p, n * sizeof(T)); }
    template <class U>
    bool operator==(const CachingAllocator<U>&) const noexcept { return true; }
    template <class U>
    bool operator!=(const CachingAllocator<U>&) const noexcept { return false; }
};

struct AllocatorStats {
    std::size_t live_bytes = 0;      // held by tensors now (rounded to the size classes)
    std::size_t cached_bytes = 0;    // freed, kept for reuse
    std::size_t peak_bytes = 0;      // max of live + cached since the last reset
    std::size_t system_allocs = 0;   // blocks obtained from the system
    std::size_t cache_hits = 0;      // allocations served from the cache
};

AllocatorStats allocator_stats();
void reset_peak_allocator_stats();
// Return every cached block to the system.
void empty_cache();
std::size_t cache_limit();
void set_cache_limit(std::size_t bytes);

}  // namespace ct
