#include "ctransformer/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <exception>
#include <functional>

#include "ctransformer/autocast.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "../kernels/weight_cache.hpp"
#include "../runtime/parallel.hpp"

namespace ct::serve {

using Clock = std::chrono::steady_clock;

namespace {

// A request's last event when it ends without a result (cancelled, timed out, failed): its kind and why.
Event ending(std::uint64_t request, Event::Kind kind, std::string message) {
    Event e;
    e.request = request;
    e.kind = kind;
    e.message = std::move(message);
    return e;
}

}  // namespace

struct Engine::Request {
    std::uint64_t id;
    std::string model;
    std::vector<std::int64_t> source;
    decode::SequenceOptions options;
    std::optional<Clock::time_point> deadline;
    bool decoding = false;
    std::size_t lane = 0;   // decoding: the lane (Model::lanes) whose batch holds it
    bool tokens = true;   // Token events wanted (a stream): a request that is not streamed waits for its end only
    std::size_t rows() const { return decode::ContinuousBatch::rows_needed(options); }
};

// A batch of one model's requests with what its requests reserve. One thread at a time steps it: the loop's, or in
// lane mode (run_lanes) the lane's own. The counts are read and written under mu_.
struct Engine::Lane {
    std::unique_ptr<decode::ContinuousBatch> batch;
    std::size_t rows_reserved = 0, tokens = 0;   // its requests' rows (a beam's beam_size) and source tokens
    std::size_t rows = 0, sequences = 0;         // its batch's live rows and sequences, as of its last count()
    void take(const Request& r) {
        rows_reserved += r.rows();
        tokens += r.source.size();
    }
    void release(const Request& r) {
        rows_reserved -= r.rows();
        tokens -= r.source.size();
    }
    void count() {   // by the thread that steps it
        rows = batch->rows();
        sequences = batch->size();
    }
};

struct Engine::Model {
    std::shared_ptr<const nn::Module> model;
    ModelSpec spec;
    std::function<std::unique_ptr<decode::ContinuousBatch>()> make_batch;
    // Its batch may run as lanes: a Transformer outside bf16. Its float32 products read the loop thread's packed
    // copies of the weights, shared with the lanes (kernels/weight_cache.hpp, SharedPacking); an int8 row comes out
    // bit for bit whichever batch and thread computes it (int8 products are exact, the rest is row by row). A bf16
    // product reads the calling thread's bf16 copies in its autocast region, and the GPT's logits are a float32
    // product whose kernel depends on the rows in it, which would make its int8 rows depend on the lane.
    bool lanes_allowed = false;
    std::vector<Lane> lanes;   // one; one a thread while run_lanes runs
    // Lane mode ends for every lane at once: set (under mu_) by the first lane to leave it. A lane that left alone
    // while its rows dipped (a wave of equal-length requests ending together) left the other stepping every row,
    // its newcomers capped at half the rows, on one core, until the load fell: half the throughput (measured).
    bool lanes_ending = false;
    std::deque<std::shared_ptr<Request>> waiting;   // under mu_
    std::size_t rows_waiting = 0;                   // the waiting requests' rows
    bool has_work() const { return !waiting.empty() || lanes[0].rows_reserved > 0; }
};

Engine::Engine(EngineOptions options) : options_(options) {
    if (options_.max_rows < 1 || options_.max_batch_tokens < 1)
        throw ValueError("Engine: max_rows and max_batch_tokens must be at least 1");
    if (options_.nice < 0 || options_.nice > 19)
        throw ValueError("Engine: nice must be from 0 to 19, got " + std::to_string(options_.nice));
    int nice = INT_MIN;   // the compute threads' nice value; INT_MIN: left as they are (raise_this_thread_nice)
    if (options_.nice > 0) {
#if defined(__linux__)
        nice = std::min(parallel::thread_nice() + int(options_.nice), 19);
        parallel::set_worker_nice(nice);
#else
        throw ValueError("Engine: nice is supported on Linux only (got " + std::to_string(options_.nice) + ")");
#endif
    }
    thread_ = std::thread([this, nice] {
        parallel::name_this_thread("ct-engine");
        parallel::raise_this_thread_nice(nice);
        loop();
    });
}

Engine::~Engine() { stop(); }

void Engine::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    work_cv_.notify_all();
    {
        std::lock_guard<std::mutex> join(join_mu_);   // stop() from two threads at once joins once
        if (thread_.joinable()) thread_.join();
    }
    event_cv_.notify_all();
}

void Engine::add_model(const std::string& name, std::shared_ptr<const nn::Transformer> model, ModelSpec spec) {
    if (!model) throw ValueError("Engine.add_model: model is null");
    auto m = std::make_unique<Model>();
    const nn::Transformer& t = *model;
    m->make_batch = [&t, spec] {
        return std::make_unique<decode::TranslationBatch>(t, spec.start_symbol, spec.end_symbol, spec.rules);
    };
    m->lanes_allowed = !spec.bf16;
    m->model = std::move(model);
    m->spec = std::move(spec);
    add(name, std::move(m));
}

void Engine::add_model(const std::string& name, std::shared_ptr<const nn::gpt::GPT> model, ModelSpec spec) {
    if (!model) throw ValueError("Engine.add_model: model is null");
    auto m = std::make_unique<Model>();
    const nn::gpt::GPT& g = *model;
    const std::optional<std::int64_t> end = spec.end_symbol >= 0 ? std::optional<std::int64_t>(spec.end_symbol)
                                                                 : std::nullopt;
    m->make_batch = [&g, end] { return std::make_unique<decode::GenerationBatch>(g, end); };
    m->model = std::move(model);
    m->spec = std::move(spec);
    add(name, std::move(m));
}

void Engine::add(const std::string& name, std::unique_ptr<Model> m) {
    m->lanes.resize(1);
    m->lanes[0].batch = m->make_batch();   // checks the symbols and rules
    std::lock_guard<std::mutex> lock(mu_);
    if (models_.count(name)) throw ValueError("Engine.add_model: a model named '" + name + "' is served already");
    models_.emplace(name, std::move(m));
}

std::vector<std::string> Engine::model_names() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> names;
    for (const auto& [name, m] : models_) names.push_back(name);
    return names;
}

std::uint64_t Engine::submit(const std::string& name, std::vector<std::int64_t> source, decode::SequenceOptions options,
                             double timeout_seconds, bool tokens) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto it = models_.find(name);
    if (it == models_.end()) {
        std::string names;
        for (const auto& [n, m] : models_) names += (names.empty() ? "'" : ", '") + n + "'";
        throw ValueError("Engine.submit: no model named '" + name + "' (served: " + (names.empty() ? "none" : names) + ")");
    }
    Model& m = *it->second;
    // The batch's checks read only the model's configuration: safe beside the loop's step.
    m.lanes[0].batch->check(source, options, "Engine.submit");
    if (options.beam_size > options_.max_rows)
        throw ValueError("Engine.submit: beam_size " + std::to_string(options.beam_size) + " is more than the engine's " +
                         std::to_string(options_.max_rows) + " rows (max_rows)");
    if (source.size() > options_.max_batch_tokens)
        throw ValueError("Engine.submit: the source's " + std::to_string(source.size()) + " tokens are more than a batch "
                         "holds (max_batch_tokens = " + std::to_string(options_.max_batch_tokens) + ")");
    if (stopping_) throw RuntimeError("Engine.submit: the engine has stopped");
    if (waiting_ >= options_.max_queue) {
        ++stats_.rejected_total;
        throw QueueFull("Engine.submit: the queue is full (" + std::to_string(options_.max_queue) + " requests waiting)");
    }
    auto r = std::make_shared<Request>();
    r->id = next_id_++;
    r->model = name;
    r->source = std::move(source);
    r->options = options;
    r->tokens = tokens || options.logprobs;
    if (timeout_seconds > 0.0) {
        r->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
        deadlines_.emplace(*r->deadline, r->id);
    }
    m.waiting.push_back(r);
    m.rows_waiting += r->rows();
    requests_.emplace(r->id, r);
    ++waiting_;
    ++stats_.requests_total;
    lock.unlock();
    work_cv_.notify_all();   // the loop, or in lane mode a lane waiting for work
    return r->id;
}

bool Engine::cancel(std::uint64_t request, bool counted) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!requests_.count(request)) return false;
        cancels_.push_back(request);
        if (!counted) uncounted_.insert(request);
    }
    work_cv_.notify_all();
    return true;
}

std::vector<Event> Engine::poll(double timeout_seconds, std::size_t max_events) {
    std::unique_lock<std::mutex> lock(mu_);
    if (events_.empty() && timeout_seconds > 0.0)
        event_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                           [this] { return !events_.empty() || loop_done_; });
    std::vector<Event> out;
    while (!events_.empty() && out.size() < max_events) {
        out.push_back(std::move(events_.front()));
        events_.pop_front();
    }
    return out;
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.queue_depth = waiting_;
    return s;
}

void Engine::push(Event e) { events_.push_back(std::move(e)); }

void Engine::forget(std::uint64_t request) {
    uncounted_.erase(request);
    const auto it = requests_.find(request);
    if (it == requests_.end()) return;
    if (it->second->deadline) deadlines_.erase({*it->second->deadline, request});
    requests_.erase(it);
}

void Engine::loop() {
    NoGradGuard no_grad;
    decode::PackedWeights packing;   // the served weights never change: each is packed once, for the engine's life
    parallel::KeepAwake awake;       // the pool's workers, between a step's products
    std::optional<autocast::Guard> bf16_region;   // keeps bf16 weight copies across steps once a bf16 model steps
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        bool bf16 = false;
        for (const auto& [name, m] : models_) bf16 = bf16 || m->spec.bf16;
        if (bf16 && !bf16_region) bf16_region.emplace(true);
        turn(lock);
    }
    // Stopped: whatever is not finished is cancelled.
    for (auto& [id, r] : requests_) push(ending(id, Event::Kind::Cancelled, "the engine stopped"));
    stats_.cancelled_total += requests_.size();
    requests_.clear();
    deadlines_.clear();
    for (auto& [name, m] : models_) {
        m->waiting.clear();
        m->rows_waiting = 0;
        m->lanes.clear();
        m->lanes.resize(1);
        m->lanes[0].batch = m->make_batch();
    }
    waiting_ = 0;
    loop_done_ = true;
    event_cv_.notify_all();
}

void Engine::turn(std::unique_lock<std::mutex>& lock) {
    leave(nullptr, 0);

    // The next model with work, round robin.
    Model* model = nullptr;
    std::string name;
    auto it = models_.lower_bound(next_model_);
    for (std::size_t i = 0; i < models_.size() && !model; ++i, ++it) {
        if (it == models_.end()) it = models_.begin();
        if (it->second->has_work()) {
            model = it->second.get();
            name = it->first;
        }
    }
    if (!model) {
        stats_.rows_in_use = 0;
        stats_.sequences = 0;
        const auto idle = [this] { return stopping_ || !cancels_.empty() || waiting_ > 0; };
        if (!deadlines_.empty())
            work_cv_.wait_until(lock, deadlines_.begin()->first, idle);
        else
            work_cv_.wait(lock, idle);
        return;
    }
    next_model_ = name + '\x01';   // the first name after this one

    if (lanes_wanted(*model, lane_count(), true)) {
        run_lanes(*model, lock);
        return;
    }
    step(*model, 0, admit(*model, 0, options_.max_rows, options_.max_batch_tokens), lock);
}

void Engine::leave(const Model* lanes_of, std::size_t lane) {
    // Requests that leave before their end: cancelled, or past their deadline. In lane mode (lanes_of) a decoding
    // request leaves through its own lane, whose thread alone touches its batch; a waiting one through any lane.
    const auto now = Clock::now();
    const auto here = [&](std::uint64_t id) {
        const auto it = requests_.find(id);
        return !lanes_of || it == requests_.end() || !it->second->decoding ||
               (it->second->lane == lane && models_.at(it->second->model).get() == lanes_of);
    };
    std::vector<std::pair<std::uint64_t, Event::Kind>> leaving;
    std::vector<std::uint64_t> others;   // cancellations for another lane
    for (std::uint64_t id : cancels_) {
        if (here(id))
            leaving.emplace_back(id, Event::Kind::Cancelled);
        else
            others.push_back(id);
    }
    cancels_ = std::move(others);
    for (auto d = deadlines_.begin(); d != deadlines_.end() && d->first <= now; ++d)
        if (here(d->second)) leaving.emplace_back(d->second, Event::Kind::TimedOut);
    for (const auto& [id, kind] : leaving) {
        const auto it = requests_.find(id);
        if (it == requests_.end()) continue;
        const std::shared_ptr<Request> r = it->second;
        Model& m = *models_.at(r->model);
        if (r->decoding) {
            Lane& l = m.lanes[r->lane];
            l.batch->retire(id);
            l.release(*r);
            l.count();
        } else {
            m.waiting.erase(std::find(m.waiting.begin(), m.waiting.end(), r));
            m.rows_waiting -= r->rows();
            --waiting_;
        }
        const bool counted = !(kind == Event::Kind::Cancelled && uncounted_.count(id));
        forget(id);
        push(ending(id, kind, kind == Event::Kind::TimedOut ? "timed out" : "cancelled"));
        if (counted) ++(kind == Event::Kind::TimedOut ? stats_.timed_out_total : stats_.cancelled_total);
    }
    if (!leaving.empty()) event_cv_.notify_all();
}

std::vector<std::shared_ptr<Engine::Request>> Engine::admit(Model& m, std::size_t lane, std::size_t max_rows,
                                                            std::size_t max_tokens) {
    // The oldest waiting requests while their rows and source tokens fit; in lane mode, only up to this lane's share
    // of the model's rows, waiting ones counted (the lanes' steps then take about as long).
    std::vector<std::shared_ptr<Request>> newcomers;
    Lane& l = m.lanes[lane];
    std::size_t share = m.rows_waiting;
    for (const Lane& each : m.lanes) share += each.rows_reserved;
    share = (share + m.lanes.size() - 1) / m.lanes.size();
    while (!m.waiting.empty()) {
        const std::shared_ptr<Request> r = m.waiting.front();
        const std::size_t rows = r->rows();
        if (l.rows_reserved + rows > max_rows || l.tokens + r->source.size() > max_tokens) break;
        if (l.rows_reserved > 0 && l.rows_reserved + rows > share) break;
        l.take(*r);
        r->decoding = true;
        r->lane = lane;
        newcomers.push_back(r);
        m.waiting.pop_front();
        m.rows_waiting -= rows;
        --waiting_;
    }
    return newcomers;
}

void Engine::step(Model& m, std::size_t lane, const std::vector<std::shared_ptr<Request>>& newcomers,
                  std::unique_lock<std::mutex>& lock) {
    // The work itself, without the lock: submit(), cancel() and poll() go on meanwhile.
    lock.unlock();
    decode::ContinuousBatch::StepResult result;
    std::string failure;
    const auto start = Clock::now();
    try {
        autocast::Guard precision(m.spec.bf16);
        decode::ContinuousBatch& batch = *m.lanes[lane].batch;
        if (!newcomers.empty()) {
            std::vector<std::uint64_t> ids;
            std::vector<std::vector<std::int64_t>> sources;
            std::vector<decode::SequenceOptions> options;
            for (const auto& r : newcomers) {
                ids.push_back(r->id);
                sources.push_back(r->source);
                options.push_back(r->options);
            }
            batch.admit(ids, sources, options);
        }
        result = batch.step();
    } catch (const std::exception& e) {
        failure = e.what();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    lock.lock();
    record(m, lane, result, failure, seconds);
}

void Engine::record(Model& m, std::size_t lane, decode::ContinuousBatch::StepResult& result,
                    const std::string& failure, double seconds) {
    stats_.steps_total += 1;
    stats_.step_seconds_total += seconds;
    stats_.last_step_seconds = seconds;
    Lane& l = m.lanes[lane];
    if (!failure.empty()) {   // every request of this lane's batch fails; the engine goes on
        std::vector<std::uint64_t> failed;
        for (const auto& [id, r] : requests_)
            if (r->decoding && r->lane == lane && models_.at(r->model).get() == &m) failed.push_back(id);
        for (const std::uint64_t id : failed) {
            forget(id);
            push(ending(id, Event::Kind::Failed, failure));
            ++stats_.failed_total;
        }
        l.rows_reserved = l.tokens = 0;
        l.batch = m.make_batch();
    }
    for (auto& t : result.tokens) {
        ++stats_.tokens_total;
        const auto it = requests_.find(t.id);
        if (it == requests_.end() || !it->second->tokens) continue;
        Event e;
        e.request = t.id;
        e.kind = Event::Kind::Token;
        e.token = t.token;
        e.logprob = t.logprob;
        e.top_logprobs = std::move(t.top);
        push(std::move(e));
    }
    for (auto& f : result.finished) {
        const auto it = requests_.find(f.id);
        if (it != requests_.end()) l.release(*it->second);
        Event e;
        e.request = f.id;
        e.kind = Event::Kind::Finished;
        e.ids = std::move(f.ids);
        e.score = f.score;
        e.alternatives = std::move(f.alternatives);
        e.alternative_scores = std::move(f.alternative_scores);
        push(std::move(e));
        forget(f.id);
        ++stats_.finished_total;
    }
    l.count();
    std::size_t rows = 0, sequences = 0;
    for (const auto& [n, model] : models_)
        for (const Lane& each : model->lanes) {
            rows += each.rows;
            sequences += each.sequences;
        }
    stats_.rows_in_use = rows;
    stats_.sequences = sequences;
    event_cv_.notify_all();
}

std::size_t Engine::lane_count() const {
    if (options_.lane_rows == 0) return 1;
    return std::min(std::size_t(parallel::threads()), options_.max_rows / options_.lane_rows);
}

bool Engine::lanes_wanted(const Model& m, std::size_t lanes, bool entering) const {
    if (!m.lanes_allowed || lanes < 2 || stopping_) return false;
    for (const auto& [name, other] : models_)   // another model's work needs the loop's round robin
        if (other.get() != &m && other->has_work()) return false;
    if (!m.waiting.empty()) {   // the oldest waiting request must fit a lane, or it would wait for lane mode to end
        const Request& r = *m.waiting.front();
        if (r.rows() > options_.max_rows / lanes || r.source.size() > options_.max_batch_tokens / lanes) return false;
    }
    std::size_t rows = m.rows_waiting;
    for (const Lane& l : m.lanes) rows += l.rows_reserved;
    // From lane_rows a lane (16: a closed loop of 32 clients, whose rows come and go, stays in lanes once in them).
    return rows >= (entering ? options_.lane_rows : (options_.lane_rows + 1) / 2) * lanes;
}

void Engine::run_lanes(Model& m, std::unique_lock<std::mutex>& lock) {
    // Split: lane 0's last sequences go to the other lanes, about a lane's share of its rows each.
    const std::size_t lanes = lane_count();
    const std::size_t share = m.lanes[0].batch->rows() / lanes;
    m.lanes.resize(lanes);
    const auto move = [&](Lane& from, Lane& to, std::size_t to_index, std::size_t rows) {
        for (const std::uint64_t id : from.batch->move_to(*to.batch, rows)) {
            Request& r = *requests_.at(id);
            r.lane = to_index;
            from.release(r);
            to.take(r);
        }
        from.count();
        to.count();
    };
    for (std::size_t l = 1; l < lanes; ++l) {
        m.lanes[l].batch = m.make_batch();
        move(m.lanes[0], m.lanes[l], l, share);
    }
    stats_.lanes = lanes;
    ++stats_.lane_runs_total;
    m.lanes_ending = false;
    lock.unlock();
    std::vector<std::exception_ptr> errors(lanes);
    weight_cache::SharedPacking shared;   // the loop's packed copies (its region lasts the loop's life), for every lane
    parallel::each_on_own_thread(lanes, [&](std::size_t l) {
        weight_cache::SharedPacking::Join join(shared);
        try {
            run_lane(m, l, lanes);
        } catch (...) {
            errors[l] = std::current_exception();   // a pool's worker must not throw (it would end the process)
            {
                std::lock_guard<std::mutex> guard(mu_);   // the other lanes end too, and the error is raised
                m.lanes_ending = true;
            }
            work_cv_.notify_all();
        }
    });
    lock.lock();
    // Merge: every lane's sequences back into lane 0, which the loop steps with every thread on each product.
    for (std::size_t l = 1; l < m.lanes.size(); ++l) move(m.lanes[l], m.lanes[0], 0, SIZE_MAX);
    m.lanes.resize(1);
    stats_.lanes = 1;
    for (const auto& error : errors)
        if (error) std::rethrow_exception(error);
}

void Engine::run_lane(Model& m, std::size_t lane, std::size_t lanes) {
    NoGradGuard no_grad;   // thread-local: a worker's own
    std::unique_lock<std::mutex> lock(mu_);
    const auto wanted = [&] { return !m.lanes_ending && lanes_wanted(m, lanes, false); };
    for (;;) {
        leave(&m, lane);
        if (!wanted()) break;
        const auto newcomers = admit(m, lane, options_.max_rows / lanes, options_.max_batch_tokens / lanes);
        if (newcomers.empty() && m.lanes[lane].rows_reserved == 0) {
            // Nothing to step: wait for a newcomer or the end of lane mode. The other lanes, stepping, take care
            // of the waiting requests' cancellations and deadlines meanwhile.
            work_cv_.wait(lock, [&] { return !m.waiting.empty() || !wanted(); });
            continue;
        }
        step(m, lane, newcomers, lock);
    }
    m.lanes_ending = true;
    work_cv_.notify_all();   // the other lanes, waiting for newcomers or stepping, end too
}

}  // namespace ct::serve
