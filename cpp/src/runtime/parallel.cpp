#include "parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/threads.hpp"

#if defined(__linux__) || defined(__APPLE__)
#include <pthread.h>
#endif
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#define CT_PAUSE() _mm_pause()
#else
#define CT_PAUSE() ((void)0)
#endif

namespace ct::parallel {

void name_this_thread(const char* name) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), name);   // fails (ERANGE) past 15 characters: the name is only a label
#elif defined(__APPLE__)
    pthread_setname_np(name);
#else
    (void)name;
#endif
}

#if defined(__linux__)
// Linux's setpriority(PRIO_PROCESS, tid) sets one thread's nice (POSIX would have it the whole process's).
static int nice_of(long tid) {   // 0: the calling thread; 0 too when it cannot be read
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, id_t(tid));
    return errno ? 0 : nice;
}
// Only ever up: lowering a nice needs a privilege, and a thread already nicer keeps its own.
static bool raise_nice(long tid, int nice) {
    return nice > nice_of(tid) && setpriority(PRIO_PROCESS, id_t(tid), std::min(nice, 19)) == 0;
}
int thread_nice() { return nice_of(0); }
bool raise_this_thread_nice(int nice) { return raise_nice(syscall(SYS_gettid), nice); }
#else
int thread_nice() { return 0; }
bool raise_this_thread_nice(int) { return false; }
#endif

namespace {

std::atomic<int> g_worker_nice{INT_MIN};   // INT_MIN: workers keep the nice they were started with

// CTRANSFORMER_SPIN_US in nanoseconds, or -1 when it is not set.
long spin_ns_from_env() {
    static const long ns = [] {
        const char* env = std::getenv("CTRANSFORMER_SPIN_US");
        return env ? std::max(0L, std::atol(env) * 1000) : -1L;
    }();
    return ns;
}

// How long a thread waiting for the others spins before sleeping. Short: a spinning worker takes the core
// from whatever runs next. CTRANSFORMER_SPIN_US overrides it.
long spin_ns() {
    const long env = spin_ns_from_env();
    return env >= 0 ? env : 30000L;
}

std::atomic<int> g_keep_awake{0};  // KeepAwake objects alive

// How long an idle worker spins before sleeping: 1 ms while a KeepAwake lives (parallel.hpp) and
// CTRANSFORMER_SPIN_US is not set, else spin_ns().
long idle_spin_ns() {
    return spin_ns_from_env() < 0 && g_keep_awake.load(std::memory_order_relaxed) > 0 ? 1000000L : spin_ns();
}

thread_local bool t_in_worker = false;  // inside a piece: nested parallel_for runs inline

// While one lives the calling thread counts as a worker: a piece that calls parallel_for runs it inline.
struct InPiece {
    InPiece() { t_in_worker = true; }
    ~InPiece() { t_in_worker = false; }
};

// Pieces are claimed dynamically: every thread, the caller included, takes the next unclaimed
// piece until none is left. On a loaded machine a worker may not get a core for a while; the
// caller then does its pieces instead of waiting for it.
// A ticket is (task, pieces, next piece) in one word. The piece count must travel with it: read
// from a field, a worker still looking at a finished task's exhausted ticket could see the next
// task's larger count, claim a piece past the old end, and run one of the new task's pieces twice
// (its done count then passes `pieces` and the caller waits forever).
constexpr unsigned kPieceBits = 20;
constexpr std::uint64_t kPieceMask = (std::uint64_t(1) << kPieceBits) - 1;
constexpr std::uint32_t kTaskMask = (std::uint32_t(1) << (64 - 2 * kPieceBits)) - 1;
std::uint64_t make_ticket(std::uint32_t task, std::size_t pieces) {
    return (std::uint64_t(task & kTaskMask) << (2 * kPieceBits)) | (std::uint64_t(pieces) << kPieceBits);
}
std::uint32_t ticket_task(std::uint64_t t) { return std::uint32_t(t >> (2 * kPieceBits)); }
std::size_t ticket_pieces(std::uint64_t t) { return std::size_t((t >> kPieceBits) & kPieceMask); }
std::uint32_t ticket_piece(std::uint64_t t) { return std::uint32_t(t & kPieceMask); }

class Pool {
public:
    explicit Pool(int workers) {
        for (int i = 0; i < workers; ++i) threads_.emplace_back([this] {
            name_this_thread("ct-worker");
#if defined(__linux__)
            {   // registered first, read after: set_worker_nice() reaches this worker one way or the other
                std::lock_guard<std::mutex> lock(tids_mu_);
                tids_.push_back(syscall(SYS_gettid));
            }
            raise_this_thread_nice(g_worker_nice.load());
#endif
            loop();
        });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_.store(true, std::memory_order_release);
            task_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    std::size_t workers() const { return threads_.size(); }

    void renice_workers(int nice) {
#if defined(__linux__)
        std::lock_guard<std::mutex> lock(tids_mu_);
        for (const long tid : tids_) raise_nice(tid, nice);
#else
        (void)nice;
#endif
    }

    // one_each: every thread, the caller included, runs one piece at most (run_each: pieces == threads).
    void run(std::size_t n, std::size_t pieces, ChunkFn fn, void* ctx, bool one_each = false) {
        if (pieces > kPieceMask) throw std::logic_error("parallel::run: too many pieces");
        std::lock_guard<std::mutex> serial(run_mu_);  // one task at a time (callers from several threads)
        n_ = n;
        fn_ = fn;
        ctx_ = ctx;
        one_each_ = one_each;
        done_.store(0, std::memory_order_relaxed);
        std::uint32_t task;
        {
            std::lock_guard<std::mutex> lock(mu_);
            task = task_.load(std::memory_order_relaxed) + 1;
            // The ticket is what threads claim from; publish it, then the task.
            ticket_.store(make_ticket(task, pieces), std::memory_order_release);
            task_.store(task, std::memory_order_release);
        }
        if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_all();
        // While it runs pieces the caller counts as a worker (InPiece): a piece that calls parallel_for
        // runs it inline (taking run_mu_ again would deadlock).
        {
            InPiece in_piece;
            work(task);
        }
        // The last pieces run on other threads: spin briefly, then sleep until the last one
        // finishes (a worker the machine preempted may hold one for a scheduler tick, and a
        // spinning caller would keep the core it needs).
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns());
        for (unsigned i = 1; done_.load(std::memory_order_acquire) != pieces; ++i) {
            CT_PAUSE();
            if (i % 64 == 0 && std::chrono::steady_clock::now() > until) {
                std::unique_lock<std::mutex> lock(done_mu_);
                caller_waiting_.store(true, std::memory_order_seq_cst);
                done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == pieces; });
                caller_waiting_.store(false, std::memory_order_relaxed);
                break;
            }
        }
    }

private:
    // Claims and runs pieces of `task` until none is left.
    void work(std::uint32_t task) {
        std::uint64_t t = ticket_.load(std::memory_order_acquire);
        for (;;) {
            if (ticket_task(t) != (task & kTaskMask)) return;
            const std::uint32_t i = ticket_piece(t);
            const std::size_t total = ticket_pieces(t);
            if (i >= total) return;
            if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
            // The claim succeeded on a piece that exists, so the task is still running: its fields
            // are stable until its last piece is done (read them before that).
            const bool one = one_each_;   // read before the piece is counted done: the task's fields change after
            fn_(ctx_, i, n_ * i / total, n_ * (i + 1) / total);
            if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == total && caller_waiting_.load(std::memory_order_seq_cst)) {
                std::lock_guard<std::mutex> lock(done_mu_);  // the caller is asleep (or about to be): wake it
                done_cv_.notify_one();
            }
            if (one) return;
            t = ticket_.load(std::memory_order_acquire);
        }
    }

    void loop() {
        t_in_worker = true;
        std::uint32_t seen = 0;
        for (;;) {
            // Spin a while (kernels come back to back within a step), then sleep.
            std::uint32_t now = seen;
            const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(idle_spin_ns());
            for (unsigned i = 1; (now = task_.load(std::memory_order_acquire)) == seen; ++i) {
                CT_PAUSE();
                if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
            }
            if (now == seen) {
                std::unique_lock<std::mutex> lock(mu_);
                sleeping_.fetch_add(1, std::memory_order_acq_rel);
                cv_.wait(lock, [&] { return (now = task_.load(std::memory_order_acquire)) != seen; });
                sleeping_.fetch_sub(1, std::memory_order_acq_rel);
            }
            seen = now;
            if (stop_.load(std::memory_order_acquire)) return;
            work(now);
        }
    }

    std::vector<std::thread> threads_;
    std::mutex tids_mu_;
    std::vector<long> tids_;   // the workers' thread ids (Linux), for renice_workers
    std::mutex mu_, run_mu_, done_mu_;
    std::condition_variable cv_, done_cv_;
    std::atomic<bool> caller_waiting_{false};
    std::atomic<std::uint32_t> task_{0};
    std::atomic<std::uint64_t> ticket_{0};
    std::atomic<std::size_t> done_{0};
    std::atomic<int> sleeping_{0};
    std::atomic<bool> stop_{false};
    std::size_t n_ = 0;
    bool one_each_ = false;
    ChunkFn fn_ = nullptr;
    void* ctx_ = nullptr;
};

std::mutex g_config_mu;
std::atomic<int> g_threads{0};                        // 0: not set, use the default
std::atomic<int (*)()> g_default_source{nullptr};     // set_default_threads_source
std::shared_ptr<Pool> g_pool;

int default_threads() {
    static const int d = [] {
        int (*source)() = g_default_source.load();
        return source ? source() : 1;
    }();
    return d > 0 ? d : 1;
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

void set_default_threads_source(int (*source)()) { g_default_source.store(source); }

KeepAwake::KeepAwake() { g_keep_awake.fetch_add(1, std::memory_order_relaxed); }
KeepAwake::~KeepAwake() { g_keep_awake.fetch_sub(1, std::memory_order_relaxed); }

void set_worker_nice(int nice) {
    g_worker_nice.store(nice);   // before the pool is read: a worker starting meanwhile reads it (Pool's constructor)
    std::shared_ptr<Pool> pool;
    {
        std::lock_guard<std::mutex> lock(g_config_mu);
        pool = g_pool;
    }
    if (pool) pool->renice_workers(nice);
}

void run(std::size_t n, std::size_t pieces, ChunkFn fn, void* ctx) {
    const int t = threads();
    if (t_in_worker || pieces <= 1 || t <= 1) {  // inline, the pieces in order with their indices
        for (std::size_t c = 0; c < pieces; ++c) fn(ctx, c, n * c / pieces, n * (c + 1) / pieces);
        return;
    }
    pool_for(t)->run(n, pieces, fn, ctx);
}

bool run_each(std::size_t count, ChunkFn fn, void* ctx) {
    const int t = threads();
    if (t_in_worker || count > std::size_t(t)) return false;
    if (count == 1) {   // on the caller, as a piece
        InPiece in_piece;
        fn(ctx, 0, 0, 1);
        return true;
    }
    if (count) pool_for(t)->run(count, count, fn, ctx, true);
    return true;
}

}  // namespace ct::parallel

namespace ct {

void set_num_threads(int n) {
    if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
    // Each thread beyond the first is a pool worker started on the next parallel op: a hostile
    // n (10**6) would exhaust the process's threads there, far from the call that asked for it.
    if (n > 1024) throw ValueError("set_num_threads: n must be at most 1024, got " + std::to_string(n));
    parallel::g_threads.store(n, std::memory_order_relaxed);  // BLAS products and the kernels alike
}

int get_num_threads() { return parallel::threads(); }

}  // namespace ct
