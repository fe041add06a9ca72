#include "ctransformer/runtime/allocator.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "ctransformer/error.hpp"

namespace ct {

namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kSmall = 4096;          // multiples of 64 up to here
constexpr std::size_t kHuge = std::size_t(2) << 20;
constexpr int kSteps = 8;                     // classes per power of two above kSmall
constexpr int kClasses = int(kSmall / kAlign) + 1 + 64 * kSteps;

// The class of a request and the bytes a block of that class holds.
int class_of(std::size_t bytes, std::size_t& rounded) {
    if (bytes <= kSmall) {
        rounded = std::max<std::size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
        return int(rounded / kAlign);
    }
    int e = 63 - __builtin_clzll(bytes - 1);            // 2^e < bytes <= 2^(e+1)
    const std::size_t step = (std::size_t(1) << e) / kSteps;
    const std::size_t k = (bytes - (std::size_t(1) << e) + step - 1) / step;  // 1..kSteps
    rounded = (std::size_t(1) << e) + k * step;
    return int(kSmall / kAlign) + 1 + (e - 12) * kSteps + int(k) - 1;
}

void* system_alloc(std::size_t bytes) {
    void* p = nullptr;
    if (bytes >= kHuge) {
        if (posix_memalign(&p, kHuge, bytes) != 0) p = nullptr;
        if (p) madvise(p, bytes, MADV_HUGEPAGE);  // a hint; harmless where THP is off
    } else if (posix_memalign(&p, kAlign, bytes) != 0) {
        p = nullptr;
    }
    return p;
}

struct Cache {
    std::mutex mu;
    std::vector<std::vector<void*>> free_lists = std::vector<std::vector<void*>>(kClasses);
    std::vector<std::size_t> class_bytes = std::vector<std::size_t>(kClasses, 0);
    AllocatorStats stats;
    std::size_t peak_live = 0;  // the most bytes ever live at once
    std::size_t limit = default_limit();

    static std::size_t default_limit() {
        if (const char* env = std::getenv("CTRANSFORMER_CACHE_LIMIT_MB")) return std::size_t(std::atoll(env)) << 20;
        return std::size_t(1) << 30;
    }
    // Release cached blocks of other classes until `need` bytes went back: one block of the
    // smallest class that covers the need on its own when there is one (freeing a 30 MB block to
    // make room for 256 KB would only make the 30 MB fault in again), else the largest first.
    void release_for(std::size_t need, int keep_class) {
        if (need == 0 || stats.cached_bytes == 0) return;
        for (int c = 0; c < kClasses; ++c) {
            if (c == keep_class || free_lists[std::size_t(c)].empty() || class_bytes[std::size_t(c)] < need) continue;
            release_one(c);
            return;
        }
        std::size_t released = 0;
        for (int c = kClasses - 1; c >= 0 && released < need && stats.cached_bytes > 0; --c) {
            if (c == keep_class) continue;
            while (!free_lists[std::size_t(c)].empty() && released < need) released += release_one(c);
        }
    }
    std::size_t release_one(int c) {
        auto& list = free_lists[std::size_t(c)];
        std::free(list.back());
        list.pop_back();
        stats.cached_bytes -= class_bytes[std::size_t(c)];
        return class_bytes[std::size_t(c)];
    }
};

Cache& cache() {
    static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
    return *c;
}

}  // namespace

std::size_t physical_memory_bytes() {
    static const std::size_t bytes = [] {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : std::size_t(0);
    }();
    return bytes;
}

void check_fits_in_memory(std::size_t bytes, const std::string& what) {
    const std::size_t total = physical_memory_bytes();
    if (total != 0 && bytes > total)
        throw MemoryError(what + " needs " + std::to_string(bytes) + " bytes, more than this machine's memory (" +
                          std::to_string(total) + " bytes)");
}

namespace detail {

std::size_t bytes_of(std::size_t n, std::size_t size) {
    std::size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        throw MemoryError("cannot allocate a tensor buffer of " + std::to_string(n) + " elements of " +
                          std::to_string(size) + " bytes: the byte count does not fit in 64 bits");
    return bytes;
}

void* cached_alloc(std::size_t bytes) {
    // Before the size classes round it (which would overflow near 2^64), and before the system
    // overcommits a buffer that can never be backed.
    check_fits_in_memory(bytes, "a tensor buffer");
    std::size_t rounded;
    const int c = class_of(bytes, rounded);
    Cache& k = cache();
    {
        std::lock_guard<std::mutex> lock(k.mu);
        auto& list = k.free_lists[std::size_t(c)];
        if (!list.empty()) {
            void* p = list.back();
            list.pop_back();
            k.stats.cached_bytes -= rounded;
            k.stats.live_bytes += rounded;
            k.peak_live = std::max(k.peak_live, k.stats.live_bytes);
            ++k.stats.cache_hits;
            return p;
        }
        k.class_bytes[std::size_t(c)] = rounded;
        // Keep the footprint (live + cached) within the most ever live at once, plus 1/16: cached
        // blocks of other sizes make room for this one rather than adding to it. Without the 1/16
        // the blocks shed at a step's peak are missed again later in the same step (the small
        // model faults in 68 MB per step; with it, none).
        const std::size_t after = k.stats.live_bytes + k.stats.cached_bytes + rounded;
        const std::size_t budget = std::max(k.peak_live, k.stats.live_bytes + rounded) + k.peak_live / 16;
        if (k.stats.cached_bytes > 0 && after > budget) k.release_for(after - budget, c);
        k.stats.live_bytes += rounded;
        k.peak_live = std::max(k.peak_live, k.stats.live_bytes);
        ++k.stats.system_allocs;
        k.stats.peak_bytes = std::max(k.stats.peak_bytes, k.stats.live_bytes + k.stats.cached_bytes);
    }
    void* p = system_alloc(rounded);
    if (!p) {
        {
            std::lock_guard<std::mutex> lock(k.mu);
            k.stats.live_bytes -= rounded;
            k.release_for(k.stats.cached_bytes, -1);  // give everything back and try once more
        }
        p = system_alloc(rounded);
        if (!p)
            throw MemoryError("out of memory: could not allocate a tensor buffer of " + std::to_string(bytes) +
                              " bytes");
        std::lock_guard<std::mutex> lock(k.mu);
        k.stats.live_bytes += rounded;
    }
    return p;
}

void cached_free(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    std::size_t rounded;
    const int c = class_of(bytes, rounded);
    Cache& k = cache();
    {
        std::lock_guard<std::mutex> lock(k.mu);
        k.stats.live_bytes -= rounded;
        if (k.stats.cached_bytes + rounded <= k.limit) {
            try {
                k.free_lists[std::size_t(c)].push_back(p);
                k.stats.cached_bytes += rounded;
                return;
            } catch (...) {  // no memory for the list entry: free the block instead
            }
        }
    }
    std::free(p);
}

}  // namespace detail

AllocatorStats allocator_stats() {
    std::lock_guard<std::mutex> lock(cache().mu);
    return cache().stats;
}

void reset_peak_allocator_stats() {
    Cache& k = cache();
    std::lock_guard<std::mutex> lock(k.mu);
    k.stats.peak_bytes = k.stats.live_bytes + k.stats.cached_bytes;
}

void empty_cache() {
    Cache& k = cache();
    std::lock_guard<std::mutex> lock(k.mu);
    k.release_for(k.stats.cached_bytes, -1);
}

std::size_t cache_limit() {
    std::lock_guard<std::mutex> lock(cache().mu);
    return cache().limit;
}

void set_cache_limit(std::size_t bytes) {
    Cache& k = cache();
    std::lock_guard<std::mutex> lock(k.mu);
    k.limit = bytes;
    if (k.stats.cached_bytes > bytes) k.release_for(k.stats.cached_bytes - bytes, -1);
}

}  // namespace ct
