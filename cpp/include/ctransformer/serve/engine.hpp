// Engine: continuous batching for a server of translation and generation requests (a Transformer's translations, a
// GPT's continuations of prompts), on a thread of its own (no Python in it).
//
// It owns the models it serves, keyed by name (the server's "name/precision"), a bounded queue of requests
// waiting, and per model a decode::ContinuousBatch of the requests being decoded (a TranslationBatch for an
// encoder-decoder Transformer, a GenerationBatch for the GPT). Its loop, each turn:
//   - takes cancellations and requests past their deadline (their rows leave the batch at once);
//   - picks the next model with work (round robin: rows of different models cannot share a product);
//   - admits that model's waiting requests, oldest first, while the rows (a beam takes beam_size) stay within
//     max_rows and the inputs' tokens within max_batch_tokens: the encoder (or the prompt) runs over the
//     newcomers only;
//   - runs one step over every live row of the model and emits events: each greedy or generated token as it
//     comes, and each finished request's output.
// A Transformer outside bf16 whose rows (waiting ones counted) reach lane_rows a thread (16) runs as lanes instead:
// its batch is split into one batch a thread, and each thread admits into, steps and emits for its own lane without
// waiting for the others, so a thread the machine preempts holds up its own rows only. The lanes merge back into one
// batch when the rows fall under half as many a thread, or another model has work, or the engine stops.
// Callers submit() from any thread and collect events with poll(). A failure inside a step fails that
// model's requests (their events say why) and the engine goes on serving.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ctransformer/decode/generation_batch.hpp"
#include "ctransformer/decode/translation_batch.hpp"
#include "ctransformer/error.hpp"

namespace ct::serve {

// submit() on a full queue.
class QueueFull : public RuntimeError {
public:
    using RuntimeError::RuntimeError;
};

struct EngineOptions {
    std::size_t max_queue = 256;           // requests waiting (not yet admitted), all models together
    std::size_t max_rows = 64;             // decoder rows of one model's batch
    std::size_t max_batch_tokens = 4096;   // source tokens of the requests in one model's batch
    // Linux: the engine's thread and the thread pool's workers run this many nice levels above the thread that
    // makes the engine (clamped to 19), so that an event loop answering HTTP in the same process gets a core at
    // once instead of after a decoding step. 0 leaves them; elsewhere only 0 is accepted.
    std::int64_t nice = 0;   // 0-19 (checked by the constructor, the one place that does)
    // Lanes (above) from lane_rows rows a thread, back to one batch under ceil(lane_rows / 2) a thread. 0: never
    // lanes. 1: lanes as soon as the rows (a beam counts beam_size) reach the threads, until the rows fall under one
    // a thread; a test forces lane mode so, and a deployment that wants every thread on its own batch too.
    std::size_t lane_rows = 16;
};

// How a model decodes: its symbols and rules (decode::TranslationBatch; a GPT reads end_symbol only, < 0 for
// none), and whether its products run in bf16 (an autocast region around each of its steps).
struct ModelSpec {
    std::int64_t start_symbol = 0, end_symbol = 0;
    decode::TokenRules rules;
    bool bf16 = false;
};

struct Event {
    enum class Kind { Token, Finished, Failed, Cancelled, TimedOut };
    std::uint64_t request = 0;
    Kind kind = Kind::Token;
    std::int64_t token = 0;              // Token: a streamed request's new token (greedy translation, or a GPT's)
    std::vector<std::int64_t> ids;       // Finished: the translation's ids, start and end symbols removed
    double score = 0.0;                  // Finished: the hypothesis' score (beam search; 0 for greedy)
    std::string message;                 // Failed: why
    float logprob = 0.0f;                // Token of a request with logprobs: the token's log-probability
    std::vector<std::pair<std::int64_t, float>> top_logprobs;   // and its top_logprobs likeliest ids with theirs
    // Finished, a beam with n_best > 1: the next best hypotheses' ids and scores, in order.
    std::vector<std::vector<std::int64_t>> alternatives;
    std::vector<double> alternative_scores;
};

struct EngineStats {
    std::size_t queue_depth = 0, rows_in_use = 0, sequences = 0;
    std::size_t lanes = 1;   // the batches the model being stepped runs as: 1, or one a thread in lane mode
    std::uint64_t lane_runs_total = 0;   // the times a model's batch split into lanes
    std::uint64_t requests_total = 0, finished_total = 0, tokens_total = 0, steps_total = 0;
    std::uint64_t rejected_total = 0, cancelled_total = 0, timed_out_total = 0, failed_total = 0;
    double step_seconds_total = 0.0;
    double last_step_seconds = 0.0;
};

class Engine {
public:
    explicit Engine(EngineOptions options = {});
    // Stops the loop; requests still waiting or decoding get Cancelled events (which no one may read).
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Serves `model` (in eval mode; it must not change while served) under `name`. ValueError if taken.
    void add_model(const std::string& name, std::shared_ptr<const nn::Transformer> model, ModelSpec spec);
    // A GPT, whose requests are prompts continued (GenerationBatch).
    void add_model(const std::string& name, std::shared_ptr<const nn::gpt::GPT> model, ModelSpec spec);
    std::vector<std::string> model_names() const;

    // Queues a request: source ids (end of sentence included), or a GPT's prompt, for model `name`. Checks them (ValueError /
    // IndexError / KeyError-like ValueError naming the model) and returns the request's id. QueueFull when
    // max_queue requests wait; RuntimeError after stop(). timeout_seconds > 0: the request times out then.
    // tokens: whether the request's tokens are sent as they come (Token events; a stream); else only its end. A
    // request with options.logprobs gets its Token events either way: they carry its log-probabilities.
    std::uint64_t submit(const std::string& name, std::vector<std::int64_t> source, decode::SequenceOptions options,
                         double timeout_seconds = 0.0, bool tokens = true);
    // Cancels a request (waiting or decoding): a Cancelled event follows; false when it is unknown or done.
    // counted false: the caller ended it on purpose (a completion reached its stop string), and cancelled_total
    // leaves it out.
    bool cancel(std::uint64_t request, bool counted = true);
    // Events since the last call, waiting up to timeout_seconds for the first; at most max_events.
    std::vector<Event> poll(double timeout_seconds, std::size_t max_events = 4096);
    EngineStats stats() const;
    // Ends the loop after its current step; every request not finished gets Cancelled. Idempotent.
    void stop();

private:
    struct Request;
    struct Lane;
    struct Model;
    void loop();
    // One turn of the loop: leaving requests, the next model with work, its newcomers and one step; or, for an int8
    // model with enough rows, its lanes until they end (run_lanes).
    void turn(std::unique_lock<std::mutex>& lock);
    // The rest run with mu_ held; step() lets it go while it computes.
    void leave(const Model* lanes_of, std::size_t lane);   // cancellations and deadlines (in lane mode, this lane's)
    std::vector<std::shared_ptr<Request>> admit(Model& m, std::size_t lane, std::size_t max_rows,
                                                std::size_t max_tokens);
    // Admits the newcomers into the lane's batch, steps it and records the step.
    void step(Model& m, std::size_t lane, const std::vector<std::shared_ptr<Request>>& newcomers,
              std::unique_lock<std::mutex>& lock);
    void record(Model& m, std::size_t lane, decode::ContinuousBatch::StepResult& result, const std::string& failure,
                double seconds);   // a step's events and counts
    std::size_t lane_count() const;
    bool lanes_wanted(const Model& m, std::size_t lanes, bool entering) const;
    void run_lanes(Model& m, std::unique_lock<std::mutex>& lock);
    void run_lane(Model& m, std::size_t lane, std::size_t lanes);
    void push(Event e);   // with mu_ held
    void forget(std::uint64_t request);   // with mu_ held: out of requests_ and deadlines_
    void add(const std::string& name, std::unique_ptr<Model> model);

    const EngineOptions options_;
    mutable std::mutex mu_;
    std::condition_variable work_cv_, event_cv_;
    std::map<std::string, std::unique_ptr<Model>> models_;
    std::map<std::uint64_t, std::shared_ptr<Request>> requests_;   // waiting or decoding
    // The requests with a timeout, soonest first: a turn reads the expired ones from the front instead of walking
    // every request (a full queue holds hundreds, and int8 steps of the small model take a few milliseconds).
    std::set<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> deadlines_;
    std::vector<std::uint64_t> cancels_;
    std::set<std::uint64_t> uncounted_;   // cancelled with counted false, until they leave
    std::deque<Event> events_;
    std::uint64_t next_id_ = 1;
    std::size_t waiting_ = 0;
    std::string next_model_;   // round robin: the first model name after the last one stepped
    bool stopping_ = false;
    bool loop_done_ = false;   // the loop has ended (its last events pushed): poll() waits no more
    std::mutex join_mu_;
    EngineStats stats_;
    std::thread thread_;
};

}  // namespace ct::serve
