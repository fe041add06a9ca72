#include "ctransformer/serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>

#include "ctransformer/autocast.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "../runtime/parallel.hpp"

namespace ct::serve {

using Clock = std::chrono::steady_clock;

struct Engine::Request {
    std::uint64_t id;
    std::string model;
    std::vector<std::int64_t> source;
    decode::SequenceOptions options;
    std::optional<Clock::time_point> deadline;
    bool decoding = false;
    bool tokens = true;   // Token events wanted (a stream): a request that is not streamed waits for its end only
};

struct Engine::Model {
    std::shared_ptr<const nn::Module> model;
    ModelSpec spec;
    std::function<std::unique_ptr<decode::ContinuousBatch>()> make_batch;
    std::unique_ptr<decode::ContinuousBatch> batch;   // the loop thread's alone (its check() reads the model only)
    std::deque<std::shared_ptr<Request>> waiting;   // under mu_
    std::map<std::uint64_t, std::size_t> tokens;    // source tokens of each request in the batch (loop thread)
    std::size_t rows_reserved = 0, tokens_in_batch = 0;
    std::map<std::uint64_t, std::size_t> rows_of;   // rows each request in the batch may take (its beam_size)
    bool has_work() const { return !waiting.empty() || !batch->empty(); }
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
    m->batch = m->make_batch();   // checks the symbols and rules
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
    m.batch->check(source, options, "Engine.submit");
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
    r->tokens = tokens;
    if (timeout_seconds > 0.0) {
        r->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
        deadlines_.emplace(*r->deadline, r->id);
    }
    m.waiting.push_back(r);
    requests_.emplace(r->id, r);
    ++waiting_;
    ++stats_.requests_total;
    lock.unlock();
    work_cv_.notify_one();
    return r->id;
}

bool Engine::cancel(std::uint64_t request) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!requests_.count(request)) return false;
        cancels_.push_back(request);
    }
    work_cv_.notify_one();
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
    for (auto& [id, r] : requests_) push({id, Event::Kind::Cancelled, 0, {}, 0.0, "the engine stopped"});
    stats_.cancelled_total += requests_.size();
    requests_.clear();
    deadlines_.clear();
    for (auto& [name, m] : models_) {
        m->waiting.clear();
        m->batch = m->make_batch();
    }
    waiting_ = 0;
    loop_done_ = true;
    event_cv_.notify_all();
}

void Engine::turn(std::unique_lock<std::mutex>& lock) {
    // Requests that leave before their end: cancelled, or past their deadline.
    const auto now = Clock::now();
    std::vector<std::pair<std::uint64_t, Event::Kind>> leaving;
    for (std::uint64_t id : cancels_) leaving.emplace_back(id, Event::Kind::Cancelled);
    cancels_.clear();
    for (auto d = deadlines_.begin(); d != deadlines_.end() && d->first <= now; ++d)
        leaving.emplace_back(d->second, Event::Kind::TimedOut);
    for (const auto& [id, kind] : leaving) {
        const auto it = requests_.find(id);
        if (it == requests_.end()) continue;
        const std::shared_ptr<Request> r = it->second;
        Model& m = *models_.at(r->model);
        if (r->decoding) {
            m.batch->retire(id);
            m.tokens_in_batch -= m.tokens[id];
            m.rows_reserved -= m.rows_of[id];
            m.tokens.erase(id);
            m.rows_of.erase(id);
        } else {
            m.waiting.erase(std::find(m.waiting.begin(), m.waiting.end(), r));
            --waiting_;
        }
        forget(id);
        push({id, kind, 0, {}, 0.0, kind == Event::Kind::TimedOut ? "timed out" : "cancelled"});
        ++(kind == Event::Kind::TimedOut ? stats_.timed_out_total : stats_.cancelled_total);
    }
    if (!leaving.empty()) event_cv_.notify_all();

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

    // Admission: the oldest waiting requests while their rows and source tokens fit.
    std::vector<std::shared_ptr<Request>> newcomers;
    while (!model->waiting.empty()) {
        const auto& r = model->waiting.front();
        const std::size_t rows = decode::ContinuousBatch::rows_needed(r->options);
        if (model->rows_reserved + rows > options_.max_rows ||
            model->tokens_in_batch + r->source.size() > options_.max_batch_tokens)
            break;
        model->rows_reserved += rows;
        model->tokens_in_batch += r->source.size();
        model->rows_of[r->id] = rows;
        model->tokens[r->id] = r->source.size();
        r->decoding = true;
        newcomers.push_back(r);
        model->waiting.pop_front();
        --waiting_;
    }

    // The work itself, without the lock: submit(), cancel() and poll() go on meanwhile.
    lock.unlock();
    decode::ContinuousBatch::StepResult result;
    std::string failure;
    const auto start = Clock::now();
    try {
        autocast::Guard precision(model->spec.bf16);
        if (!newcomers.empty()) {
            std::vector<std::uint64_t> ids;
            std::vector<std::vector<std::int64_t>> sources;
            std::vector<decode::SequenceOptions> options;
            for (const auto& r : newcomers) {
                ids.push_back(r->id);
                sources.push_back(r->source);
                options.push_back(r->options);
            }
            model->batch->admit(ids, sources, options);
        }
        result = model->batch->step();
    } catch (const std::exception& e) {
        failure = e.what();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    lock.lock();

    stats_.steps_total += 1;
    stats_.step_seconds_total += seconds;
    stats_.last_step_seconds = seconds;
    if (!failure.empty()) {   // every request of this model's batch fails; the engine goes on
        for (const auto& [id, rows] : model->rows_of) {
            forget(id);
            push({id, Event::Kind::Failed, 0, {}, 0.0, failure});
            ++stats_.failed_total;
        }
        model->rows_of.clear();
        model->tokens.clear();
        model->rows_reserved = model->tokens_in_batch = 0;
        model->batch = model->make_batch();
    }
    for (const auto& t : result.tokens) {
        ++stats_.tokens_total;
        const auto it = requests_.find(t.id);
        if (it != requests_.end() && it->second->tokens) push({t.id, Event::Kind::Token, t.token, {}, 0.0, {}});
    }
    for (auto& f : result.finished) {
        push({f.id, Event::Kind::Finished, 0, std::move(f.ids), f.score, {}});
        forget(f.id);
        model->rows_reserved -= model->rows_of[f.id];
        model->tokens_in_batch -= model->tokens[f.id];
        model->rows_of.erase(f.id);
        model->tokens.erase(f.id);
        ++stats_.finished_total;
    }
    std::size_t rows = 0, sequences = 0;
    for (const auto& [n, m] : models_) {
        rows += m->batch->rows();
        sequences += m->batch->size();
    }
    stats_.rows_in_use = rows;
    stats_.sequences = sequences;
    event_cv_.notify_all();
}

}  // namespace ct::serve
