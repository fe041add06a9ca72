#include "ctransformer/distributed/batch_shard.hpp"

#include <string>

#include "ctransformer/error.hpp"

namespace ct::distributed {

namespace {
thread_local BatchShard t_shard;
thread_local bool t_active = false;
}  // namespace

BatchShardGuard::BatchShardGuard(std::int64_t begin, std::int64_t rows, std::int64_t global_rows)
    : previous_(t_shard), had_previous_(t_active) {
    if (global_rows < 1 || rows < 1 || begin < 0 || begin + rows > global_rows)
        throw ValueError("BatchShard: expected 0 <= begin, 1 <= rows and begin + rows <= global_rows, got begin " +
                         std::to_string(begin) + ", rows " + std::to_string(rows) + ", global_rows " +
                         std::to_string(global_rows));
    t_shard = {begin, rows, global_rows};
    t_active = true;
}

BatchShardGuard::~BatchShardGuard() {
    t_shard = previous_;
    t_active = had_previous_;
}

const BatchShard* current_batch_shard() { return t_active ? &t_shard : nullptr; }

std::uint64_t global_mask_offset(std::size_t numel, const char* what) {
    if (!t_active) return 0;
    const std::uint64_t rows = std::uint64_t(t_shard.rows);
    if (numel % rows != 0)
        throw ValueError(std::string(what) + ": under a batch shard of " + std::to_string(rows) +
                         " rows, dropout needs a batch-major tensor, but it has " + std::to_string(numel) +
                         " elements, not a multiple of the rows");
    return std::uint64_t(t_shard.begin) * (numel / rows);
}

}  // namespace ct::distributed
