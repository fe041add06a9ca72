// ctransformer._core.decode: greedy decoding, beam search and cached GPT generation. Arguments are
// converted and checked here (each error names its argument); the decoding runs in C++ with the GIL
// released and without recording a graph.
#include <pybind11/stl.h>

#include <limits>
#include <optional>

#include "bindings.hpp"
#include "convert.hpp"
#include "interrupt.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/decode/beam_search.hpp"
#include "ctransformer/decode/gpt_generate.hpp"
#include "ctransformer/decode/gpt_incremental.hpp"
#include "ctransformer/decode/step_decoder.hpp"
#include "ctransformer/decode/greedy.hpp"
#include "ctransformer/decode/hf_beam_search.hpp"
#include "ctransformer/decode/lanes.hpp"
#include "ctransformer/error.hpp"

namespace ctpy {

using ct::IndexArray;
using ct::Mask;
using namespace ct::nn;

namespace {

// A count argument >= minimum (an int or a NumPy integer; any Python int, range-checked).
std::size_t to_count(const py::handle& obj, const std::string& fn, const char* arg, std::int64_t minimum) {
    return std::size_t(to_int_at_least(obj, fn + ": " + arg, minimum));
}

std::optional<std::int64_t> opt_int(const py::object& obj, const std::string& fn, const char* arg) {
    if (obj.is_none()) return std::nullopt;
    return to_int(obj, fn + ": " + arg);
}


}  // namespace

namespace {

ct::decode::TokenRules token_rules(const std::vector<ctpy::Int>& banned, bool force_end, const char* what) {
    ct::decode::TokenRules rules;
    for (const auto& id : banned) rules.banned.push_back(to_int(id, what));
    rules.force_end = force_end;
    return rules;
}

// transformers' early_stopping: False, True or "never".
ct::decode::EarlyStopping early_stopping_of(const py::object& early_stopping, const std::string& fn) {
    if (py::isinstance<py::str>(early_stopping) && early_stopping.cast<std::string>() == "never")
        return ct::decode::EarlyStopping::Never;
    if (py::isinstance<py::bool_>(early_stopping))
        return early_stopping.cast<bool>() ? ct::decode::EarlyStopping::True : ct::decode::EarlyStopping::False;
    throw ct::ValueError(fn + ": early_stopping must be False, True or 'never', got " +
                         py::repr(early_stopping).cast<std::string>());
}

// A search's n-best per source as (ids (b, n_best, max_len) padded with pad, scores (b, n_best), -inf where fewer
// were found); with best_only, (b, max_len) and (b,).
py::tuple hypotheses_to_numpy(const std::vector<std::vector<ct::decode::Hypothesis>>& found, std::size_t keep,
                              std::size_t n, std::int64_t pad, bool best_only) {
    const std::size_t b = found.size();
    py::array_t<std::int64_t> out_ids({py::ssize_t(b), py::ssize_t(keep), py::ssize_t(n)});
    py::array_t<double> scores({py::ssize_t(b), py::ssize_t(keep)});
    std::int64_t* pi = out_ids.mutable_data();
    double* ps = scores.mutable_data();
    std::fill_n(pi, b * keep * n, pad);
    std::fill_n(ps, b * keep, -std::numeric_limits<double>::infinity());
    for (std::size_t s = 0; s < b; ++s)
        for (std::size_t j = 0; j < found[s].size(); ++j) {
            std::copy(found[s][j].ids.begin(), found[s][j].ids.end(), pi + (s * keep + j) * n);
            ps[s * keep + j] = found[s][j].score;
        }
    if (best_only) return py::make_tuple(out_ids.attr("reshape")(py::make_tuple(b, n)), scores.attr("reshape")(b));
    return py::make_tuple(out_ids, scores);
}

}  // namespace

void bind_decode(py::module_& m) {
    m.attr("DEFAULT_BEAM_SIZE") = ct::decode::defaults::beam_size;
    m.attr("DEFAULT_ALPHA") = ct::decode::defaults::alpha;
    m.def("greedy_decode", [](const Transformer& model, py::object src, py::object src_mask, ctpy::Int max_len,
                              ctpy::Int start_symbol, py::object end_symbol, bool use_cache,
                              bool return_logits, std::vector<ctpy::Int> banned, bool force_end) -> py::object {
        const std::string fn = "greedy_decode";
        const ct::decode::TokenRules rules = token_rules(banned, force_end, "greedy_decode: banned");
        const IndexArray ids = to_index_array(src, "greedy_decode: src");
        const auto mask = opt_mask(src_mask, "greedy_decode: src_mask");
        const std::size_t n = to_count(max_len, fn, "max_len", 1);
        const std::int64_t start = to_int(start_symbol, "greedy_decode: start_symbol");
        const auto end = opt_int(end_symbol, fn, "end_symbol");
        const auto should_stop = python_should_stop();
        ct::decode::GreedyOutput out;
        {
            py::gil_scoped_release release;
            out = ct::decode::greedy_decode(model, ids, mask ? &*mask : nullptr, n, start, end, use_cache, return_logits,
                                            should_stop, rules);
        }
        if (!return_logits) return ids_to_numpy(out.ids);
        return py::make_tuple(ids_to_numpy(out.ids), copy_to_numpy(*out.logits));
    }, py::arg("model"), py::arg("src"), py::arg("src_mask"), py::arg("max_len"), py::arg("start_symbol"),
       py::arg("end_symbol") = py::none(), py::arg("use_cache") = true, py::arg("return_logits") = false,
       py::arg("banned") = std::vector<ctpy::Int>{}, py::arg("force_end") = false,
       "(b, max_len) int64 ids; with return_logits, also the (b, max_len - 1, n_trg_vocab) float32 logits of "
       "each step (NaN after a row ended). See ctransformer.decode.greedy_decode.");

    m.def("beam_search", [](const Transformer& model, py::object src, py::object src_mask, ctpy::Int max_len,
                            ctpy::Int start_symbol, py::object end_symbol, ctpy::Int beam_size, double alpha,
                            py::object n_best, bool use_cache, std::vector<ctpy::Int> banned,
                            bool force_end) -> py::tuple {
        const std::string fn = "beam_search";
        const ct::decode::TokenRules rules = token_rules(banned, force_end, "beam_search: banned");
        const IndexArray ids = to_index_array(src, "beam_search: src");
        const auto mask = opt_mask(src_mask, "beam_search: src_mask");
        const std::size_t n = to_count(max_len, fn, "max_len", 1);
        const std::int64_t start = to_int(start_symbol, "beam_search: start_symbol");
        const std::int64_t end = to_int(end_symbol, "beam_search: end_symbol");
        const std::size_t beam = to_count(beam_size, fn, "beam_size", 1);
        const std::size_t keep = n_best.is_none() ? 1 : to_count(n_best, fn, "n_best", 1);
        const auto should_stop = python_should_stop();
        std::vector<std::vector<ct::decode::Hypothesis>> found;
        {
            py::gil_scoped_release release;
            found = ct::decode::beam_search(model, ids, mask ? &*mask : nullptr, n, start, end, beam, alpha, keep,
                                            use_cache, should_stop, rules);
        }
        return hypotheses_to_numpy(found, keep, n, model.config.trg_pad_idx, n_best.is_none());
    }, py::arg("model"), py::arg("src"), py::arg("src_mask"), py::arg("max_len"), py::arg("start_symbol"),
       py::arg("end_symbol"), py::arg("beam_size") = ct::decode::defaults::beam_size,
       py::arg("alpha") = ct::decode::defaults::alpha, py::arg("n_best") = py::none(), py::arg("use_cache") = true,
       py::arg("banned") = std::vector<ctpy::Int>{}, py::arg("force_end") = false,
       "(ids (b, max_len) int64, scores (b,) float64), or with n_best=k (ids (b, k, max_len), scores (b, k)). "
       "See ctransformer.decode.beam_search.");

    m.def("hf_beam_search", [](const Transformer& model, py::object src, py::object src_mask, ctpy::Int max_len,
                               ctpy::Int start_symbol, ctpy::Int end_symbol, ctpy::Int num_beams, ctpy::Real length_penalty,
                               py::object early_stopping, py::object n_best, std::vector<ctpy::Int> banned,
                               bool force_end) -> py::tuple {
        const std::string fn = "hf_beam_search";
        const ct::decode::TokenRules rules = token_rules(banned, force_end, "hf_beam_search: banned");
        const IndexArray ids = to_index_array(src, "hf_beam_search: src");
        const auto mask = opt_mask(src_mask, "hf_beam_search: src_mask");
        const std::size_t n = to_count(max_len, fn, "max_len", 2);
        const std::int64_t start = to_int(start_symbol, "hf_beam_search: start_symbol");
        const std::int64_t end = to_int(end_symbol, "hf_beam_search: end_symbol");
        const std::size_t beams = to_count(num_beams, fn, "num_beams", 1);
        const double penalty = to_double(length_penalty, "hf_beam_search: length_penalty");
        const ct::decode::EarlyStopping stopping = early_stopping_of(early_stopping, fn);
        const std::size_t keep = n_best.is_none() ? 1 : to_count(n_best, fn, "n_best", 1);
        const auto should_stop = python_should_stop();
        std::vector<std::vector<ct::decode::Hypothesis>> found;
        {
            py::gil_scoped_release release;
            found = ct::decode::hf_beam_search(model, ids, mask ? &*mask : nullptr, n, start, end, beams, penalty,
                                               stopping, keep, should_stop, rules);
        }
        return hypotheses_to_numpy(found, keep, n, model.config.trg_pad_idx, n_best.is_none());
    }, py::arg("model"), py::arg("src"), py::arg("src_mask"), py::arg("max_len"), py::arg("start_symbol"),
       py::arg("end_symbol"), py::arg("num_beams") = 4, py::arg("length_penalty") = 1.0,
       py::arg("early_stopping") = false, py::arg("n_best") = py::none(), py::arg("banned") = std::vector<ctpy::Int>{},
       py::arg("force_end") = false,
       "(ids (b, max_len) int64, scores (b,) float64), or with n_best=k (ids (b, k, max_len), scores (b, k)). "
       "See ctransformer.decode.hf_beam_search.");

    m.def("search_batches", [](const Transformer& model, py::list batches, ctpy::Int start_symbol,
                               ctpy::Int end_symbol, ctpy::Int beam_size, double alpha, const std::string& search,
                               py::object early_stopping, std::vector<ctpy::Int> banned, bool force_end,
                               bool lanes) -> py::list {
        const std::string fn = "search_batches";
        if (search != "gnmt" && search != "hf")
            throw ct::ValueError(fn + ": search must be 'gnmt' or 'hf', got '" + search + "'");
        const ct::decode::TokenRules rules = token_rules(banned, force_end, "search_batches: banned");
        const std::int64_t start = to_int(start_symbol, "search_batches: start_symbol");
        const std::int64_t end = to_int(end_symbol, "search_batches: end_symbol");
        const std::size_t beam = to_count(beam_size, fn, "beam_size", 1);
        const ct::decode::EarlyStopping stopping = early_stopping_of(early_stopping, fn);
        struct Batch {
            IndexArray src;
            std::optional<Mask> mask;
            std::size_t max_len;
        };
        std::vector<Batch> in;
        for (std::size_t i = 0; i < batches.size(); ++i) {
            const std::string at = fn + ": batches[" + std::to_string(i) + "]";
            if (!py::isinstance<py::tuple>(batches[i]) || py::len(batches[i]) != 3)
                throw ct::TypeError(at + " must be a tuple (src, src_mask, max_len)");
            const py::tuple t = batches[i].cast<py::tuple>();
            in.push_back({to_index_array(t[0], (at + " src").c_str()), opt_mask(t[1], (at + " src_mask").c_str()),
                          to_count(t[2], at, "max_len", search == "hf" ? 2 : 1)});
        }
        const auto should_stop = python_should_stop();
        std::vector<std::vector<std::vector<ct::decode::Hypothesis>>> found(in.size());
        {
            py::gil_scoped_release release;
            ct::decode::run_calls(in.size(), [&](std::size_t i, const ct::decode::ShouldStop& stop) {
                const Batch& b = in[i];
                const Mask* mask = b.mask ? &*b.mask : nullptr;
                found[i] = search == "hf"
                    ? ct::decode::hf_beam_search(model, b.src, mask, b.max_len, start, end, beam, alpha, stopping, 1,
                                                 stop, rules)
                    : ct::decode::beam_search(model, b.src, mask, b.max_len, start, end, beam, alpha, 1, true, stop,
                                              rules);
            }, should_stop, lanes);
        }
        py::list out;
        for (std::size_t i = 0; i < in.size(); ++i)
            out.append(hypotheses_to_numpy(found[i], 1, in[i].max_len, model.config.trg_pad_idx, true));
        return out;
    }, py::arg("model"), py::arg("batches"), py::arg("start_symbol"), py::arg("end_symbol"), py::arg("beam_size"),
       py::arg("alpha"), py::arg("search") = "gnmt", py::arg("early_stopping") = false,
       py::arg("banned") = std::vector<ctpy::Int>{}, py::arg("force_end") = false, py::arg("lanes") = true,
       "Per batch (src, src_mask, max_len), its (ids (b, max_len) int64, scores (b,) float64), each batch's search "
       "run whole on one thread when lanes is set and there are two or more. See "
       "ctransformer.decode.search_batches.");

    m.def("runs_in_lanes", [](ctpy::Int calls, bool lanes) {
        return ct::decode::runs_in_lanes(to_count(calls, "runs_in_lanes", "calls", 0), lanes);
    }, py::arg("calls"), py::arg("lanes") = true,
       "Whether search_batches would run this many batches in lanes (threads, autocast and the count allowing).");

    m.def("length_penalty", [](py::object length, double alpha) {
        return ct::decode::length_penalty(to_count(length, "length_penalty", "length", 0), alpha);
    }, py::arg("length"), py::arg("alpha"), "GNMT's ((5 + length) / 6) ** alpha.");

    m.def("generate", [](const gpt::GPT& model, py::object idx, ctpy::Int max_new_tokens, float temperature,
                         py::object top_k, bool use_cache) {
        const std::string fn = "generate";
        const IndexArray ids = to_index_array(idx, "generate: idx");
        const std::size_t n = to_count(max_new_tokens, fn, "max_new_tokens", 0);
        const auto k = opt_int(top_k, fn, "top_k");
        const auto should_stop = python_should_stop();
        IndexArray out;
        {
            py::gil_scoped_release release;
            out = ct::decode::generate(model, ids, n, temperature, k, should_stop, use_cache);
        }
        return ids_to_numpy(out);
    }, py::arg("model"), py::arg("idx"), py::arg("max_new_tokens"), py::arg("temperature") = 1.0f,
       py::arg("top_k") = py::none(), py::arg("use_cache") = true,
       "(b, t + max_new_tokens) int64 ids. See ctransformer.decode.generate.");

    // --- the steppers, for custom decoding loops and for the tests ----------------------------------
    // A Python `with` region around ct::decode::PackedWeights (entered and left on the same thread).
    struct PackedRegion {
        std::optional<ct::decode::PackedWeights> held;
    };
    py::class_<PackedRegion>(m, "PackedWeights", R"doc(with ctransformer.decode.PackedWeights(): ... -- from a parameter's
second product of 3 or more rows (a batch of sentences or beams, outside autograd and autocast) on, the
product reads the parameter packed once, instead of sgemm packing it on every call.
greedy_decode and beam_search hold one; a loop of one's own over a StepDecoder, or over many calls (the
Translator's batches), can too. The weights must not change inside it, and the packed copies take as much
memory as the weights. CPUs with AVX-512 or AVX2 only (elsewhere, or at kernel level "portable", it does
nothing); another legal float32 summation order.)doc")
        .def(py::init<>())
        .def("__enter__", [](PackedRegion& r) -> PackedRegion& {
            if (!r.held) r.held.emplace();
            return r;
        }, py::return_value_policy::reference)
        .def("__exit__", [](PackedRegion& r, py::args) { r.held.reset(); })
        .def_property_readonly_static("count", [](py::object) { return ct::decode::PackedWeights::count(); },
                                      "How many weights this thread's region holds packed (0 outside one).");
    using ct::decode::StepDecoder;
    py::class_<StepDecoder>(m, "StepDecoder", R"doc(The encoder-decoder driven one target position at a time.

StepDecoder(model, src, src_mask, use_cache=True) encodes src (b, ls) once; step(ids) feeds one token per
row (an int array of shape (rows,)) at position `length` and returns the (rows, n_trg_vocab) logits of
that position; select(rows) keeps, reorders or repeats rows (a list of row indices). use_cache=True keeps
key/value caches (one position's work per step); False re-decodes the whole prefix each step.)doc")
        .def(py::init([](py::object model_obj, py::object src, py::object src_mask, bool use_cache) {
            if (!py::isinstance<Transformer>(model_obj))
                throw ct::TypeError("StepDecoder: model must be a ct.nn.Transformer, got " + type_name(model_obj));
            const Transformer& model = model_obj.cast<const Transformer&>();
            const IndexArray ids = to_index_array(src, "StepDecoder: src");
            const auto mask = opt_mask(src_mask, "StepDecoder: src_mask");
            py::gil_scoped_release release;
            return ct::decode::make_step_decoder(model, ids, mask ? &*mask : nullptr, use_cache);
        }), py::arg("model"), py::arg("src"), py::arg("src_mask"), py::arg("use_cache") = true,
           py::keep_alive<1, 2>())
        .def("step", [](StepDecoder& d, py::object ids) {
            const IndexArray a = to_index_array(ids, "StepDecoder.step: ids");
            if (a.shape.size() != 1)
                throw ct::ValueError("StepDecoder.step: ids must be 1-D (one token per row), got shape " +
                                     ct::shape_str(a.shape));
            py::gil_scoped_release release;
            return d.step(a.data);
        }, py::arg("ids"))
        .def("select", [](StepDecoder& d, py::object rows_obj) {
            if (!py::isinstance<py::sequence>(rows_obj) || py::isinstance<py::str>(rows_obj))
                throw ct::TypeError("StepDecoder.select: rows must be a list of row indices, got " +
                                    py::str(py::type::of(rows_obj)).cast<std::string>());
            std::vector<std::size_t> rows;
            for (auto r : py::reinterpret_borrow<py::sequence>(rows_obj)) {
                // An index beyond 64 bits is as out of range as any other; the core names the range.
                int overflow = 0;
                if (PyIndex_Check(r.ptr()) && !py::isinstance<py::bool_>(r))
                    PyLong_AsLongLongAndOverflow(py::int_(py::reinterpret_borrow<py::object>(r)).ptr(), &overflow);
                if (overflow != 0 || (PyIndex_Check(r.ptr()) && py::int_(py::reinterpret_borrow<py::object>(r)) < py::int_(0)))
                    throw ct::IndexError("StepDecoder.select: row " + py::str(r).cast<std::string>() +
                                         " is out of range for " + std::to_string(d.rows()) + " rows");
                rows.push_back(std::size_t(to_int(r, "StepDecoder.select: rows")));
            }
            py::gil_scoped_release release;
            d.select(rows);
        }, py::arg("rows"))
        .def_property_readonly("rows", &StepDecoder::rows)
        .def_property_readonly("length", &StepDecoder::length);

    using ct::decode::GPTIncremental;
    py::class_<GPTIncremental>(m, "GPTCache", R"doc(A GPT fed a few positions at a time, with every layer's keys/values kept.

GPTCache(model); step(ids) feeds ids (rows, s) at positions length .. length + s - 1 (at most max_seq_len
in all) and returns the (rows, vocab_size) logits of the last one; reset() forgets every position.
reserve(positions) makes room for that many positions (at most max_seq_len) at the first step and after each
reset, so the caches never grow by copying while they stay within it; capacity is the room they have now.)doc")
        .def(py::init<const gpt::GPT&>(), py::arg("model"), py::keep_alive<1, 2>())
        .def("step", [](GPTIncremental& c, py::object ids) {
            const IndexArray a = to_index_array(ids, "GPTCache.step: ids");
            py::gil_scoped_release release;
            return c.step(a);
        }, py::arg("ids"))
        .def("reset", &GPTIncremental::reset)
        .def("reserve", [](GPTIncremental& c, ctpy::Int positions) {
            c.reserve(std::size_t(to_size(positions, "GPTCache.reserve: positions")));
        }, py::arg("positions"))
        .def_property_readonly("capacity", &GPTIncremental::capacity)
        .def_property_readonly("length", &GPTIncremental::length);
}

}  // namespace ctpy
