// Data parallelism for the non-BLAS kernels (softmax, layer_norm, elementwise, embedding, losses,
// Adam) and the BLAS products (blas.cpp): parallel_for cuts [0, n) into a few contiguous pieces
// (up to kPiecesPerThread per thread) that the threads of a small persistent pool, the caller
// included, claim one at a time; a thread the machine does not schedule for a while then delays
// nothing, the others take its pieces.
//
// The pool has get_num_threads() - 1 workers; BLAS products are split over the same pool
// (blas.cpp), so kernels and products never run more threads than asked. Between tasks a worker spins
// briefly (a training step issues kernels back to back) and then sleeps, so an idle library costs
// no CPU. Work smaller than `grain` per thread runs inline: the hand-off costs ~1-2 us.
#pragma once
#include <cstddef>

namespace ct::parallel {

using ChunkFn = void (*)(void* ctx, std::size_t chunk, std::size_t begin, std::size_t end);

// The threads parallel_for uses (1 = everything inline), and the BLAS's products too (blas.cpp splits them
// over this pool); ct::set_num_threads (threads.hpp, defined in parallel.cpp) sets it.
int threads();
// Until then the count is the BLAS's own default (OPENBLAS_NUM_THREADS or the cores), which the BLAS door
// hands over when it is loaded (blas.cpp): the pool never calls into the BLAS. 1 without a BLAS.
void set_default_threads_source(int (*source)());
// Runs fn(ctx, chunk, begin, end) over [0, n) cut into `chunks` contiguous pieces (piece i
// covers [n i / chunks, n (i + 1) / chunks)), each once, on any thread.
void run(std::size_t n, std::size_t chunks, ChunkFn fn, void* ctx);

// Runs fn(ctx, i, i, i + 1) for every i in [0, count) at once, each on a thread of its own (the caller runs one):
// for pieces that run long and wait on one another (the serving engine's lanes, serve/engine.cpp), which run() could
// give one thread in turn. Inside a piece, parallel_for runs inline; the pool runs one task at a time, so other
// threads' parallel work waits until the pieces end. false, running nothing, when the pool cannot give each piece a
// thread: count above threads(), or a call from inside a piece.
bool run_each(std::size_t count, ChunkFn fn, void* ctx);

constexpr std::size_t kPiecesPerThread = 4;

// Names the calling thread for the system (top -H, ps -L, /proc/PID/task/TID/comm, a debugger, py-spy):
// at most 15 characters; nothing where the system has no names.
void name_this_thread(const char* name);

// Linux: the calling thread's nice value (0 elsewhere), and raising it, for that thread alone, to `nice` clamped to
// 19 when that is above its own (other threads keep theirs; true when it was set). Raising a thread's nice needs no
// privilege, lowering it does, so it is never lowered. Elsewhere raise_this_thread_nice changes nothing and returns
// false.
int thread_nice();
bool raise_this_thread_nice(int nice);
// Linux: runs the pool's workers, those running now and those started later, at this nice value (threads whose
// nice is higher already keep theirs: lowering it needs a privilege). The serving engine sets it, so that its
// compute threads yield the cores to the event loop that answers HTTP.
void set_worker_nice(int nice);

// While one lives, an idle worker spins up to 1 ms before it sleeps, instead of 30 us. A decoding call
// (greedy_decode, beam_search) runs its products tens of microseconds apart, with serial work between them.
// Waking a sleeping worker for each product cost greedy decoding at batch 32 3-5% of its time (AVX2
// stand-in, 2026-11-27). CTRANSFORMER_SPIN_US, when set, still decides.
class KeepAwake {
public:
    KeepAwake();
    ~KeepAwake();
    KeepAwake(const KeepAwake&) = delete;
    KeepAwake& operator=(const KeepAwake&) = delete;
};

// How many pieces parallel_for cuts n items into: each at least `grain` items, at most
// kPiecesPerThread per thread (1 when single-threaded).
inline std::size_t chunks_for(std::size_t n, std::size_t grain, std::size_t per_thread = kPiecesPerThread) {
    const std::size_t t = std::size_t(threads());
    if (t <= 1) return 1;
    std::size_t chunks = grain ? n / grain : n;
    const std::size_t most = t * per_thread;
    return chunks > most ? most : (chunks ? chunks : 1);
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

// f(i) for every i in [0, count), each on a thread of its own at once (run_each); false, running nothing, when the
// threads are too few.
template <class F>
bool each_on_own_thread(std::size_t count, F&& f) {
    return run_each(count, [](void* ctx, std::size_t i, std::size_t, std::size_t) { (*static_cast<F*>(ctx))(i); }, &f);
}

// f(begin, end) over [0, n), split across threads when pieces get at least `grain` items.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& f, std::size_t per_thread = kPiecesPerThread) {
    const std::size_t chunks = chunks_for(n, grain, per_thread);
    if (chunks <= 1) {
        if (n) f(std::size_t(0), n);
        return;
    }
    run(n, chunks, [](void* ctx, std::size_t, std::size_t b, std::size_t e) { (*static_cast<F*>(ctx))(b, e); }, &f);
}

}  // namespace ct::parallel
