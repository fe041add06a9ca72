// ctransformer._core.serve: the continuous-batching engine (cpp/include/ctransformer/serve/engine.hpp). The
// engine's loop runs on its own thread and never takes the GIL; poll() and stop() release it while they wait.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"
#include "ctransformer/nn/transformer.hpp"
#include "ctransformer/serve/engine.hpp"

namespace ctpy {

using ct::decode::SequenceOptions;
using ct::serve::Engine;
using ct::serve::Event;

namespace {

const char* kind_name(Event::Kind k) {
    switch (k) {
        case Event::Kind::Token: return "token";
        case Event::Kind::Finished: return "finished";
        case Event::Kind::Failed: return "failed";
        case Event::Kind::Cancelled: return "cancelled";
        case Event::Kind::TimedOut: return "timed_out";
    }
    return "unknown";
}

}  // namespace

void bind_serve(py::module_& m) {
    py::register_exception<ct::serve::QueueFull>(m, "QueueFull", PyExc_RuntimeError);
    py::class_<SequenceOptions>(m, "SequenceOptions",
                                "What one request asks of the engine: its length limit, its search (a translation) or "
                                "its sampling, logit adjustments and log-probabilities (a generation). Checked here by "
                                "type and name, and against the model by Engine.submit.")
        .def(py::init([](Int max_len, Int beam_size, Real alpha, const std::string& search, py::object early_stopping,
                         Real temperature, Int top_k, Real top_p, Int seed, py::object logit_bias,
                         Real presence_penalty, Real frequency_penalty, bool logprobs, Int top_logprobs, Int n_best) {
                 SequenceOptions o;
                 o.max_len = std::size_t(to_int_at_least(max_len, "SequenceOptions: max_len", 2));
                 o.beam_size = std::size_t(to_int_at_least(beam_size, "SequenceOptions: beam_size", 1));
                 o.alpha = to_double(alpha, "SequenceOptions: alpha");
                 if (search == "hf")
                     o.search = SequenceOptions::Search::HuggingFace;
                 else if (search != "gnmt")
                     throw ct::ValueError("SequenceOptions: search must be 'gnmt' or 'hf', got '" + search + "'");
                 if (py::isinstance<py::str>(early_stopping) && early_stopping.cast<std::string>() == "never")
                     o.early_stopping = ct::decode::EarlyStopping::Never;
                 else if (py::isinstance<py::bool_>(early_stopping))
                     o.early_stopping = early_stopping.cast<bool>() ? ct::decode::EarlyStopping::True
                                                                    : ct::decode::EarlyStopping::False;
                 else
                     throw ct::ValueError("SequenceOptions: early_stopping must be False, True or 'never'");
                 o.temperature = float(to_double(temperature, "SequenceOptions: temperature"));
                 o.top_k = to_size(top_k, "SequenceOptions: top_k");
                 o.top_p = float(to_double(top_p, "SequenceOptions: top_p"));
                 o.seed = std::uint64_t(to_int(seed, "SequenceOptions: seed"));
                 if (!logit_bias.is_none()) {
                     if (!py::isinstance<py::dict>(logit_bias))
                         throw ct::TypeError("SequenceOptions: logit_bias must be a dict {token id: bias}, got " +
                                             type_name(logit_bias));
                     for (const auto& [id, bias] : logit_bias.cast<py::dict>())
                         o.logit_bias.emplace_back(to_int(id, "SequenceOptions: logit_bias's token id"),
                                                   float(to_double(bias, "SequenceOptions: logit_bias's value")));
                 }
                 o.presence_penalty = float(to_double(presence_penalty, "SequenceOptions: presence_penalty"));
                 o.frequency_penalty = float(to_double(frequency_penalty, "SequenceOptions: frequency_penalty"));
                 o.logprobs = logprobs;
                 o.top_logprobs = to_size(top_logprobs, "SequenceOptions: top_logprobs");
                 o.n_best = std::size_t(to_int_at_least(n_best, "SequenceOptions: n_best", 1));
                 return o;
             }),
             py::kw_only(), py::arg("max_len"), py::arg("beam_size") = 1, py::arg("alpha") = 0.6,
             py::arg("search") = "gnmt", py::arg("early_stopping") = false, py::arg("temperature") = 0.0,
             py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0, py::arg("logit_bias") = py::none(),
             py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0, py::arg("logprobs") = false,
             py::arg("top_logprobs") = 0, py::arg("n_best") = 1,
             "max_len: target positions, the start symbol counted (a GPT: the prompt and the new ids). A translation: "
             "search 'gnmt' (decode.beam_search's rules; beam_size 1 is greedy) or 'hf' (decode.hf_beam_search's, "
             "beam_size its num_beams, alpha its length_penalty, with early_stopping), ending with its n_best best "
             "hypotheses (1 to beam_size). A generation: temperature 0 "
             "takes the first maximum, > 0 samples among the top_k ids (0: all) and the top_p nucleus from a "
             "generator seeded with seed (top_p 1: as decode.generate after manual_seed(seed)); logit_bias "
             "{id: bias} and the presence and frequency penalties adjust the logits first (OpenAI's definitions); "
             "logprobs: each token's log-probability in its event, with the top_logprobs likeliest ids' (0-20).")
        .def_property_readonly("max_len", [](const SequenceOptions& o) { return o.max_len; })
        .def_property_readonly("beam_size", [](const SequenceOptions& o) { return o.beam_size; })
        .def_property_readonly("temperature", [](const SequenceOptions& o) { return o.temperature; })
        .def_property_readonly("seed", [](const SequenceOptions& o) { return o.seed; })
        .def_property_readonly("logprobs", [](const SequenceOptions& o) { return o.logprobs; })
        .def_property_readonly("top_logprobs", [](const SequenceOptions& o) { return o.top_logprobs; })
        .def_property_readonly("n_best", [](const SequenceOptions& o) { return o.n_best; });
    py::class_<Event>(m, "Event",
                      "One of a request's events: kind 'token' (a streamed token, with its logprob and top_logprobs "
                      "when asked), 'finished' (ids, score; a beam's n_best - 1 next best as alternatives and "
                      "alternative_scores), 'failed' (message), 'cancelled' or 'timed_out'.")
        .def_readonly("request", &Event::request)
        .def_property_readonly("kind", [](const Event& e) { return kind_name(e.kind); })
        .def_readonly("token", &Event::token)
        .def_readonly("ids", &Event::ids)
        .def_readonly("score", &Event::score)
        .def_readonly("message", &Event::message)
        .def_readonly("logprob", &Event::logprob)
        .def_readonly("top_logprobs", &Event::top_logprobs)
        .def_readonly("alternatives", &Event::alternatives)
        .def_readonly("alternative_scores", &Event::alternative_scores)
        .def("__repr__", [](const Event& e) {
            return "Event(request=" + std::to_string(e.request) + ", kind='" + kind_name(e.kind) + "')";
        });
    py::class_<Engine>(m, "Engine",
                       "Continuous batching of translation and generation requests on a thread of its own: submit() "
                       "sources or prompts, poll() events (tokens as streamed requests make them, finished outputs). "
                       "ctransformer.serve."
                       "AsyncEngine is the Python face of it.")
        .def(py::init([](Int max_queue, Int max_rows, Int max_batch_tokens, Int nice, Int lane_rows) {
                 ct::serve::EngineOptions o;
                 o.max_queue = to_size(max_queue, "Engine: max_queue");
                 o.max_rows = std::size_t(to_int_at_least(max_rows, "Engine: max_rows", 1));
                 o.max_batch_tokens = std::size_t(to_int_at_least(max_batch_tokens, "Engine: max_batch_tokens", 1));
                 o.nice = to_int(nice, "Engine: nice");   // its range: Engine's constructor
                 o.lane_rows = to_size(lane_rows, "Engine: lane_rows");
                 return std::make_unique<Engine>(o);
             }),
             py::arg("max_queue") = 256, py::arg("max_rows") = 64, py::arg("max_batch_tokens") = 4096,
             py::arg("nice") = 0, py::arg("lane_rows") = 16,
             "nice: Linux only; the engine's thread and the thread pool's workers run this many nice levels (0-19) "
             "above the calling thread, so that the process's other threads (an event loop) get the cores first. "
             "lane_rows: a Transformer's batch (outside bf16) runs as one batch a thread once its rows, waiting ones "
             "counted, reach lane_rows a thread, and merges back under half as many; 0: never, 1: from one row a "
             "thread.")
        .def("add_model",
             [](Engine& e, const std::string& name, py::object model, py::object start_symbol, py::object end_symbol,
                std::vector<Int> banned, bool force_end, bool bf16) {
                 ct::serve::ModelSpec spec;
                 spec.end_symbol = end_symbol.is_none() ? -1 : to_int(end_symbol, "Engine.add_model: end_symbol");
                 for (const auto& id : banned) spec.rules.banned.push_back(to_int(id, "Engine.add_model: banned"));
                 spec.rules.force_end = force_end;
                 spec.bf16 = bf16;
                 if (py::isinstance<ct::nn::gpt::GPT>(model)) {
                     e.add_model(name, model.cast<std::shared_ptr<ct::nn::gpt::GPT>>(), std::move(spec));
                     return;
                 }
                 if (!py::isinstance<ct::nn::Transformer>(model))
                     throw ct::TypeError("Engine.add_model: model must be a ct.nn.Transformer or a ct.nn.GPT, got " +
                                         type_name(model));
                 if (start_symbol.is_none() || end_symbol.is_none())
                     throw ct::ValueError("Engine.add_model: a Transformer needs start_symbol and end_symbol");
                 spec.start_symbol = to_int(start_symbol, "Engine.add_model: start_symbol");
                 e.add_model(name, model.cast<std::shared_ptr<ct::nn::Transformer>>(), std::move(spec));
             },
             py::arg("name"), py::arg("model"), py::arg("start_symbol") = py::none(), py::arg("end_symbol") = py::none(),
             py::arg("banned") = std::vector<Int>{}, py::arg("force_end") = false, py::arg("bf16") = false,
             "Serve `model` (eval mode; it must not change while served) under `name`: a Transformer (translations "
             "from start_symbol to end_symbol, with the banned ids and force_end of greedy_decode), or a GPT "
             "(continuations of prompts, ended by end_symbol when given).")
        .def_property_readonly("model_names", &Engine::model_names)
        .def("submit",
             [](Engine& e, const std::string& model, const std::vector<Int>& source,
                const ct::decode::SequenceOptions& options, Real timeout, bool tokens) {
                 std::vector<std::int64_t> ids;
                 ids.reserve(source.size());
                 for (const auto& id : source) ids.push_back(to_int(id, "Engine.submit: source"));
                 const double seconds = to_double(timeout, "Engine.submit: timeout");
                 py::gil_scoped_release release;
                 return e.submit(model, std::move(ids), options, seconds, tokens);
             },
             py::arg("model"), py::arg("source"), py::arg("options"), py::arg("timeout") = 0.0,
             py::arg("tokens") = true,
             "Queue a request (source ids, end of sentence included; a GPT's prompt ids) with its SequenceOptions and "
             "return its id; QueueFull when the queue is full. timeout: seconds (0: none). tokens: send its tokens as "
             "they come ('token' events), else its end only (a request with logprobs gets its token events anyway).")
        .def("cancel", &Engine::cancel, py::arg("request"), py::arg("counted") = true,
             py::call_guard<py::gil_scoped_release>(),
             "Cancel a request (a 'cancelled' event follows); False when it is unknown or done. counted=False: ended "
             "on purpose (a stop string reached), left out of cancelled_total.")
        .def("poll",
             [](Engine& e, Real timeout, Int max_events) {
                 const double seconds = to_double(timeout, "Engine.poll: timeout");
                 const std::size_t most = std::size_t(to_int_at_least(max_events, "Engine.poll: max_events", 1));
                 std::vector<Event> events;
                 {
                     py::gil_scoped_release release;
                     events = e.poll(seconds, most);
                 }
                 py::list out(events.size());
                 for (std::size_t i = 0; i < events.size(); ++i) out[i] = py::cast(std::move(events[i]));
                 return out;
             },
             py::arg("timeout") = 0.0, py::arg("max_events") = 4096,
             "Events since the last call (Event objects, each a request's); waits up to `timeout` seconds for the "
             "first.")
        .def("stats",
             [](const Engine& e) {
                 const ct::serve::EngineStats s = e.stats();
                 py::dict d;
                 d["queue_depth"] = s.queue_depth;
                 d["rows_in_use"] = s.rows_in_use;
                 d["sequences"] = s.sequences;
                 d["lanes"] = s.lanes;
                 d["lane_runs_total"] = s.lane_runs_total;
                 d["requests_total"] = s.requests_total;
                 d["finished_total"] = s.finished_total;
                 d["tokens_total"] = s.tokens_total;
                 d["steps_total"] = s.steps_total;
                 d["step_seconds_total"] = s.step_seconds_total;
                 d["last_step_seconds"] = s.last_step_seconds;
                 d["rejected_total"] = s.rejected_total;
                 d["cancelled_total"] = s.cancelled_total;
                 d["timed_out_total"] = s.timed_out_total;
                 d["failed_total"] = s.failed_total;
                 return d;
             })
        .def("stop", &Engine::stop, py::call_guard<py::gil_scoped_release>(),
             "End the loop; every request not finished gets a 'cancelled' event.");
}

}  // namespace ctpy
