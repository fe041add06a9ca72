// Data parallelism for the non-BLAS kernels (softmax, layer_norm, elementwise, embedding, losses,
// Adam): parallel_for splits [0, n) into one contiguous chunk per thread of a small persistent
// pool; the calling thread runs the first chunk itself.
//
// The pool has get_num_threads() - 1 workers, the threads OpenBLAS uses (set_num_threads sets
// both), so the kernels and BLAS never run more threads than asked. Between tasks a worker spins
// briefly (a training step issues kernels back to back) and then sleeps, so an idle library costs
// no CPU. Work smaller than `grain` per thread runs inline: the hand-off costs ~1-2 us.
#pragma once
#include <cstddef>

namespace ct::parallel {

using ChunkFn = void (*)(void* ctx, std::size_t chunk, std::size_t begin, std::size_t end);

// The threads parallel_for uses (1 = everything inline).
int threads();
void set_threads(int n);
// Runs fn(ctx, chunk, begin, end) over [0, n) cut into `chunks` contiguous pieces (at most one
// per thread; chunk i covers [n i / chunks, n (i + 1) / chunks)).
void run(std::size_t n, std::size_t chunks, ChunkFn fn, void* ctx);

// How many chunks parallel_for cuts n items into: one per thread, each at least `grain` items.
inline std::size_t chunks_for(std::size_t n, std::size_t grain) {
    const std::size_t t = std::size_t(threads());
    std::size_t chunks = grain ? n / grain : n;
    return chunks > t ? t : (chunks ? chunks : 1);
}

// f(chunk, begin, end) over [0, n) in exactly `chunks` pieces (from chunks_for), e.g. for
// per-chunk partial sums.
template <class F>
void parallel_chunks(std::size_t n, std::size_t chunks, F&& f) {
    if (chunks <= 1) {
        if (n) f(std::size_t(0), std::size_t(0), n);
        return;
    }
    run(n, chunks, [](void* ctx, std::size_t c, std::size_t b, std::size_t e) { (*static_cast<F*>(ctx))(c, b, e); }, &f);
}

// f(begin, end) over [0, n), split across threads when each gets at least `grain` items.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& f) {
    const std::size_t chunks = chunks_for(n, grain);
    if (chunks <= 1) {
        if (n) f(std::size_t(0), n);
        return;
    }
    run(n, chunks, [](void* ctx, std::size_t, std::size_t b, std::size_t e) { (*static_cast<F*>(ctx))(b, e); }, &f);
}

}  // namespace ct::parallel
