// Dropout at a sample's place in the global batch, whichever process runs it.
//
// In data-parallel training each process runs rows [begin, begin + rows) of a global batch of
// global_rows samples, padded to the global batch's lengths. A dropout mask is one draw of the
// library generator (the same draw in every process, as every process makes the same calls) and a
// counter per element (random_bits.hpp), so a process that starts its counter at
// begin * (elements per sample) draws exactly its rows of the mask one process would draw for the
// whole batch: N processes and one process drop the same units. Needs batch-major tensors (the
// batch is the outermost dimension), as every model here is.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ct::distributed {

struct BatchShard {
    std::int64_t begin = 0;        // first row of the global batch this process runs
    std::int64_t rows = 0;         // rows it runs
    std::int64_t global_rows = 0;  // rows of the global batch
};

// Sets this thread's shard for the guard's lifetime (the previous one comes back after).
class BatchShardGuard {
public:
    BatchShardGuard(std::int64_t begin, std::int64_t rows, std::int64_t global_rows);
    ~BatchShardGuard();
    BatchShardGuard(const BatchShardGuard&) = delete;
    BatchShardGuard& operator=(const BatchShardGuard&) = delete;

private:
    BatchShard previous_;
    bool had_previous_;
};

// This thread's shard, or nullptr outside any guard.
const BatchShard* current_batch_shard();

// The global mask index of element 0 of a batch-major tensor of `numel` elements on this thread's
// shard: 0 without a shard. A tensor whose size is not a multiple of the shard's rows cannot be
// batch-major: a ct::ValueError naming `what`.
std::uint64_t global_mask_offset(std::size_t numel, const char* what);

}  // namespace ct::distributed
