#include "parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define CT_PAUSE() _mm_pause()
#else
#define CT_PAUSE() ((void)0)
#endif

extern "C" int openblas_get_num_threads(void);  // the library ct links; see blas.cpp

namespace ct::parallel {

namespace {

// How long an idle worker spins before sleeping. Short: a spinning worker takes the core from
// OpenBLAS's threads during the next gemm. CTRANSFORMER_SPIN_US overrides it.
long spin_ns() {
    static const long ns = [] {
        const char* env = std::getenv("CTRANSFORMER_SPIN_US");
        return env ? std::atol(env) * 1000 : 30000L;
    }();
    return ns;
}

thread_local bool t_in_worker = false;  // nested parallel_for runs inline

class Pool {
public:
    explicit Pool(int workers) {
        // Each worker starts from epoch 0, not from whatever epoch it sees when it first runs:
        // a task posted before the thread got going must still be picked up.
        for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(std::size_t(i) + 1, 0); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_.store(true, std::memory_order_release);
            epoch_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    std::size_t workers() const { return threads_.size(); }

    void run(std::size_t n, std::size_t chunks, ChunkFn fn, void* ctx) {
        std::lock_guard<std::mutex> serial(run_mu_);  // one task at a time (callers from several threads)
        n_ = n;
        chunks_ = chunks;
        fn_ = fn;
        ctx_ = ctx;
        pending_.store(chunks - 1, std::memory_order_relaxed);
        {
            std::lock_guard<std::mutex> lock(mu_);
            epoch_.fetch_add(1, std::memory_order_release);
        }
        if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_all();
        fn(ctx, 0, 0, bound(1));  // chunk 0 on the calling thread
        while (pending_.load(std::memory_order_acquire) != 0) CT_PAUSE();
    }

private:
    std::size_t bound(std::size_t chunk) const { return n_ * chunk / chunks_; }

    void loop(std::size_t index, std::uint64_t seen) {
        t_in_worker = true;
        for (;;) {
            // Spin a while (kernels come back to back within a step), then sleep.
            std::uint64_t now = seen;
            const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns());
            for (unsigned i = 1; (now = epoch_.load(std::memory_order_acquire)) == seen; ++i) {
                CT_PAUSE();
                if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
            }
            if (now == seen) {
                std::unique_lock<std::mutex> lock(mu_);
                sleeping_.fetch_add(1, std::memory_order_acq_rel);
                cv_.wait(lock, [&] { return (now = epoch_.load(std::memory_order_acquire)) != seen; });
                sleeping_.fetch_sub(1, std::memory_order_acq_rel);
            }
            seen = now;
            if (stop_.load(std::memory_order_acquire)) return;
            if (index < chunks_) {
                fn_(ctx_, index, bound(index), bound(index + 1));
                pending_.fetch_sub(1, std::memory_order_acq_rel);
            }
        }
    }

    std::vector<std::thread> threads_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_;
    std::atomic<std::uint64_t> epoch_{0};
    std::atomic<int> sleeping_{0};
    std::atomic<std::size_t> pending_{0};
    std::atomic<bool> stop_{false};
    std::size_t n_ = 0, chunks_ = 1;
    ChunkFn fn_ = nullptr;
    void* ctx_ = nullptr;
};

std::mutex g_config_mu;
std::atomic<int> g_threads{0};  // 0: not set yet, use the hardware's count
std::shared_ptr<Pool> g_pool;

int default_threads() {  // OpenBLAS's own default (OPENBLAS_NUM_THREADS or the cores)
    const int t = openblas_get_num_threads();
    return t > 0 ? t : 1;
}

std::shared_ptr<Pool> pool_for(int threads) {
    std::lock_guard<std::mutex> lock(g_config_mu);
    if (!g_pool || int(g_pool->workers()) != threads - 1) {
        g_pool.reset();
        g_pool = std::make_shared<Pool>(threads - 1);
    }
    return g_pool;
}

}  // namespace

int threads() {
    const int t = g_threads.load(std::memory_order_relaxed);
    return t > 0 ? t : default_threads();
}

void set_threads(int n) {
    g_threads.store(n < 1 ? 1 : n, std::memory_order_relaxed);
}

void run(std::size_t n, std::size_t chunks, ChunkFn fn, void* ctx) {
    // Inline when nested or when the pool is smaller than asked: the chunks still run, in order,
    // with their own indices (callers may keep per-chunk partial results).
    std::shared_ptr<Pool> pool = t_in_worker || chunks <= 1 ? nullptr : pool_for(threads());
    if (!pool || chunks > pool->workers() + 1) {
        for (std::size_t c = 0; c < chunks; ++c) fn(ctx, c, n * c / chunks, n * (c + 1) / chunks);
        return;
    }
    pool->run(n, chunks, fn, ctx);
}

}  // namespace ct::parallel
