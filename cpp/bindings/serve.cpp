// ctransformer._core.serve: the continuous-batching engine (cpp/include/ctransformer/serve/engine.hpp). The
// engine's loop runs on its own thread and never takes the GIL; poll() and stop() release it while they wait.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"
#include "ctransformer/nn/transformer.hpp"
#include "ctransformer/serve/engine.hpp"

namespace ctpy {

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
             [](Engine& e, const std::string& model, const std::vector<Int>& source, Int max_len, Int beam_size,
                Real alpha, Real timeout, const std::string& search, py::object early_stopping, Real temperature,
                Int top_k, Real top_p, Int seed, bool tokens) {
                 std::vector<std::int64_t> ids;
                 ids.reserve(source.size());
                 for (const auto& id : source) ids.push_back(to_int(id, "Engine.submit: source"));
                 ct::decode::SequenceOptions o;
                 o.beam_size = std::size_t(to_int_at_least(beam_size, "Engine.submit: beam_size", 1));
                 o.alpha = to_double(alpha, "Engine.submit: alpha");
                 o.max_len = std::size_t(to_int_at_least(max_len, "Engine.submit: max_len", 2));
                 const double seconds = to_double(timeout, "Engine.submit: timeout");
                 o.temperature = float(to_double(temperature, "Engine.submit: temperature"));
                 o.top_k = to_size(top_k, "Engine.submit: top_k");
                 o.top_p = float(to_double(top_p, "Engine.submit: top_p"));
                 o.seed = std::uint64_t(to_int(seed, "Engine.submit: seed"));
                 if (search == "hf")
                     o.search = ct::decode::SequenceOptions::Search::HuggingFace;
                 else if (search != "gnmt")
                     throw ct::ValueError("Engine.submit: search must be 'gnmt' or 'hf', got '" + search + "'");
                 if (py::isinstance<py::str>(early_stopping) && early_stopping.cast<std::string>() == "never")
                     o.early_stopping = ct::decode::EarlyStopping::Never;
                 else if (py::isinstance<py::bool_>(early_stopping))
                     o.early_stopping = early_stopping.cast<bool>() ? ct::decode::EarlyStopping::True
                                                                    : ct::decode::EarlyStopping::False;
                 else
                     throw ct::ValueError("Engine.submit: early_stopping must be False, True or 'never'");
                 py::gil_scoped_release release;
                 return e.submit(model, std::move(ids), o, seconds, tokens);
             },
             py::arg("model"), py::arg("source"), py::arg("max_len"), py::arg("beam_size") = 1, py::arg("alpha") = 0.6,
             py::arg("timeout") = 0.0, py::arg("search") = "gnmt", py::arg("early_stopping") = false,
             py::arg("temperature") = 0.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
             py::arg("tokens") = true,
             "Queue a request (source ids, end of sentence included; a GPT's prompt ids) and return its id; QueueFull "
             "when the queue is full. max_len: target positions, the start symbol counted (a GPT: the prompt and the "
             "new ids). tokens: send its tokens as they come ('token' events), else its end only. "
             "search 'gnmt' (decode.beam_search's rules; beam_size 1 is greedy) or 'hf' (decode.hf_beam_search's, "
             "beam_size its num_beams, alpha its length_penalty, with early_stopping). A GPT's request: temperature "
             "0 takes the first maximum, > 0 samples among the top_k ids (0: all) and the top_p nucleus from a "
             "generator seeded with seed (top_p 1: as decode.generate after manual_seed(seed)).")
        .def("cancel", &Engine::cancel, py::arg("request"), py::call_guard<py::gil_scoped_release>())
        .def("poll",
             [](Engine& e, Real timeout, Int max_events) {
                 const double seconds = to_double(timeout, "Engine.poll: timeout");
                 const std::size_t most = std::size_t(to_int_at_least(max_events, "Engine.poll: max_events", 1));
                 std::vector<Event> events;
                 {
                     py::gil_scoped_release release;
                     events = e.poll(seconds, most);
                 }
                 py::list out;
                 for (auto& ev : events)
                     out.append(py::make_tuple(ev.request, kind_name(ev.kind), ev.token, py::cast(ev.ids), ev.score,
                                               ev.message));
                 return out;
             },
             py::arg("timeout") = 0.0, py::arg("max_events") = 4096,
             "Events since the last call as (request, kind, token, ids, score, message) tuples, kind one of 'token', "
             "'finished', 'failed', 'cancelled', 'timed_out'; waits up to `timeout` seconds for the first.")
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
