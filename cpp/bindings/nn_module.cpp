// ctransformer.nn: the Module base (parameters, state_dict, train/eval) and the basic layers.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/dynamic_module.hpp"
#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/layer_norm.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/runtime/random.hpp"

namespace ctpy {

using ct::Tensor;
using namespace ct::nn;

namespace {

py::list named_list(const NamedTensors& entries) {
    py::list out;
    for (const auto& [name, t] : entries) out.append(py::make_tuple(name, t));
    return out;
}

std::string module_repr(const Module& m, const std::string& indent = "") {
    std::string s = m.type_name() + "(";
    auto children = m.named_children();
    if (children.empty()) return s + ")";
    for (const auto& [name, child] : children) s += "\n" + indent + "  (" + name + "): " + module_repr(*child, indent + "  ");
    return s + "\n" + indent + ")";
}

// The module a Python subclass of ctransformer.nn.Module is built on; null for the C++ layers, whose
// members are fixed (their attributes are plain properties).
DynamicModule* dynamic(const py::handle& self) {
    // A subclass that sets an attribute before super().__init__() has no C++ module yet (torch: the same error).
    auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
    if (!instance->get_value_and_holder().holder_constructed())
        throw py::attribute_error("cannot assign to " + std::string(py::str(py::type::of(self).attr("__name__"))) +
                                  " before Module.__init__() call: call super().__init__() first");
    auto* module = dynamic_cast<DynamicModule*>(self.cast<Module*>());
    if (module) module->set_type_name(py::str(py::type::of(self).attr("__name__")));
    return module;
}

DynamicModule& dynamic_or_throw(const py::handle& self, const char* method) {
    DynamicModule* module = dynamic(self);
    if (!module)
        throw ct::TypeError(std::string(method) + ": " + self.cast<Module&>().type_name() + "'s members are fixed in "
                            "C++; this is for subclasses of ctransformer.nn.Module");
    return *module;
}

void generic_setattr(const py::handle& self, const py::handle& name, const py::handle& value) {
    if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value ? value.ptr() : nullptr) != 0)
        throw py::error_already_set();
}

// torch.nn.Module.__setattr__'s rules: a Module becomes a child and a leaf tensor that requires grad a
// parameter (ctransformer's stand-in for torch.nn.Parameter); a tensor set on a buffer's name replaces the
// buffer; anything else set on a registered name is an error, except None, which forgets it.
void register_member(DynamicModule& module, const std::string& name, const py::handle& value) {
    using Kind = Module::Kind;
    const Kind was = module.registered_as(name);
    if (py::isinstance<Module>(value)) {
        module.set_module(name, value.cast<std::shared_ptr<Module>>());
    } else if (py::isinstance<Tensor>(value)) {
        const Tensor& t = value.cast<const Tensor&>();
        if (t.is_leaf() && t.requires_grad())
            module.set_parameter(name, t);
        else if (was == Kind::Buffer)
            module.set_buffer(name, t);
        else if (was != Kind::None)
            module.set_parameter(name, t);     // throws: says what a parameter must be
    } else if (value.is_none()) {
        module.remove(name);
    } else if (was != Kind::None) {
        const char* what = was == Kind::Child ? "child module" : was == Kind::Buffer ? "buffer" : "parameter";
        const char* expected = was == Kind::Child ? "a ctransformer.nn.Module" :
                               was == Kind::Buffer ? "a Tensor" : "a ctransformer.nn.Parameter";
        throw ct::TypeError("cannot assign " + type_name(value) + " as " + what + " '" + name + "' (" + expected +
                            " or None expected)");
    }
}

// register_parameter / register_buffer / add_module(self, name, value): None forgets the name; anything else must
// be a T, which `set` registers. The attribute is then set too, so `self.<name>` reads it, as in torch.
template <class T, class Set>
void register_by_name(py::handle self, const char* method, const std::string& name, py::handle value, const char* arg,
                      const char* expected, Set set) {
    DynamicModule& module = dynamic_or_throw(self, method);
    if (value.is_none()) {
        module.remove(name);
    } else {
        if (!py::isinstance<T>(value))
            throw ct::TypeError(std::string(method) + ": " + arg + " must be " + expected + " or None, got " +
                                type_name(value));
        set(module);
    }
    generic_setattr(self, py::str(name), value);
}

}  // namespace

void bind_nn_module(py::module_& nn) {
    // module= names its home, as for the classes (namedtuple guesses from the caller's frame, and finds none here).
    auto load_result = py::module_::import("collections").attr("namedtuple")(
        "IncompatibleKeys", py::make_tuple("missing_keys", "unexpected_keys"), py::arg("module") = nn.attr("__name__"));
    nn.attr("IncompatibleKeys") = load_result;

    nn.def("skip_init", [](py::object module_cls, py::args args, py::kwargs kwargs) {
        if (!PyCallable_Check(module_cls.ptr()))
            throw py::type_error("skip_init: module_cls must be a module class (callable), got " +
                                 std::string(py::str(py::type::of(module_cls).attr("__name__"))));
        ct::SkipInit skip;   // this thread's initialisers draw nothing until the module is built
        return module_cls(*args, **kwargs);
    }, py::arg("module_cls"), R"doc(skip_init(module_cls, *args, **kwargs): ``module_cls(*args, **kwargs)`` without initialising its
parameters, as torch.nn.utils.skip_init: they are left zeros and nothing is drawn from the generator (its state
is as before). For a model whose every parameter is loaded next (``from_pretrained`` uses it: GPT-2's random
initialisation took ~10 s).)doc");

    auto add_module = [](py::handle self, const std::string& name, py::handle module) {
        register_by_name<Module>(self, "add_module", name, module, "module", "a ctransformer.nn.Module",
                                 [&](DynamicModule& m) { m.set_module(name, module.cast<std::shared_ptr<Module>>()); });
    };
    py::class_<Module, std::shared_ptr<Module>>(nn, "Module", R"doc(Base of every layer: a tree of named parameters.

Subclass it as torch.nn.Module: call ``super().__init__()`` first, then assign the members. A Module
becomes a child, a ``ctransformer.nn.Parameter`` (a leaf tensor that requires grad) a parameter, and
``register_buffer`` adds a buffer; ``forward`` is what calling the module runs. ``parameters()``,
``state_dict()`` (torch's names and order), ``train()``/``eval()`` and ``zero_grad()`` then cover them.)doc",
                                                 py::dynamic_attr())   // as torch's: any attribute may be set
        .def(py::init([]() { return std::shared_ptr<Module>(std::make_shared<DynamicModule>()); }),
             "An empty module: what a subclass's super().__init__() builds on.")
        .def("__setattr__", [](py::handle self, py::str name, py::handle value) {
            if (DynamicModule* module = dynamic(self)) register_member(*module, name, value);
            generic_setattr(self, name, value);
        })
        .def("__delattr__", [](py::handle self, py::str name) {
            if (DynamicModule* module = dynamic(self)) module->remove(name);
            generic_setattr(self, name, py::handle());
        })
        .def("register_parameter", [](py::handle self, const std::string& name, py::handle param) {
            register_by_name<Tensor>(self, "register_parameter", name, param, "param", "a ctransformer.nn.Parameter", [&](DynamicModule& m) {
                m.set_parameter(name, param.cast<const Tensor&>());
            });
        }, py::arg("name"), py::arg("param"), "As torch.nn.Module.register_parameter.")
        .def("register_buffer", [](py::handle self, const std::string& name, py::handle tensor, bool persistent) {
            register_by_name<Tensor>(self, "register_buffer", name, tensor, "tensor", "a ctransformer Tensor", [&](DynamicModule& m) {
                m.set_buffer(name, tensor.cast<const Tensor&>(), persistent);
            });
        }, py::arg("name"), py::arg("tensor"), py::arg("persistent") = true,
           "As torch.nn.Module.register_buffer: state_dict holds the buffer when persistent.")
        .def("add_module", add_module, py::arg("name"), py::arg("module"), "As torch.nn.Module.add_module.")
        .def("register_module", add_module, py::arg("name"), py::arg("module"), "As torch.nn.Module.register_module.")
        .def("forward", [](py::handle self, py::args, py::kwargs) -> py::object {
            const std::string message = "Module [" + py::str(py::type::of(self).attr("__name__")).cast<std::string>() +
                                        "] is missing the required \"forward\" function";
            PyErr_SetString(PyExc_NotImplementedError, message.c_str());   // torch's words and exception
            throw py::error_already_set();
        }, "What calling the module runs: a subclass defines it.")
        // One __call__ for every layer, as torch.nn.Module's: module(...) is module.forward(...), whose
        // binding names and checks the arguments and releases the GIL.
        .def("__call__", [](py::object self, py::args args, py::kwargs kwargs) {
            return self.attr("forward")(*args, **kwargs);
        }, "module(*args, **kwargs) calls module.forward(*args, **kwargs).")
        .def("parameters", &Module::parameters, "Every parameter once (a tied weight appears once).")
        .def("named_parameters", [](const Module& m) { return named_list(m.named_parameters()); },
             "(name, Tensor) pairs; a tied weight appears once, under its first name.")
        .def("buffers", [](const Module& m) {
            std::vector<Tensor> out;
            for (auto& [name, t] : m.named_buffers()) out.push_back(t);
            return out;
        })
        .def("named_buffers", [](const Module& m) { return named_list(m.named_buffers()); })
        .def("named_children", [](const Module& m) { return m.named_children(); })
        .def("children", [](const Module& m) {
            std::vector<std::shared_ptr<Module>> out;
            for (auto& [name, c] : m.named_children()) out.push_back(c);
            return out;
        })
        .def("state_dict", [](const Module& m) {
            py::dict out;  // insertion-ordered: torch's order
            for (const auto& [name, t] : m.state_dict()) out[py::str(name)] = to_numpy(t).attr("copy")();
            return out;
        }, "name -> float32 NumPy array (a copy), parameters and persistent buffers, tied names included.")
        .def("load_state_dict", [load_result](Module& m, const py::object& state_dict, bool strict) {
            if (!py::isinstance<py::dict>(state_dict))
                throw ct::TypeError("load_state_dict: state_dict must be a dict of name -> array, got " +
                                    type_name(state_dict));
            std::map<std::string, ct::Array> arrays;
            for (auto item : py::reinterpret_borrow<py::dict>(state_dict)) {
                const std::string key = py::str(item.first);
                arrays.emplace(key, to_array(item.second, ("state_dict['" + key + "']").c_str()));
            }
            Module::LoadResult r;
            {
                py::gil_scoped_release release;
                r = m.load_state_dict(arrays, strict);
            }
            return load_result(r.missing_keys, r.unexpected_keys);
        }, py::arg("state_dict"), py::arg("strict") = true,
           "Copy arrays (NumPy, torch CPU tensors, ctransformer tensors) into the parameters in place.")
        .def("quantize", [](std::shared_ptr<Module> m, const std::string& dtype) {
            {
                py::gil_scoped_release release;
                m->quantize(dtype);
            }
            return m;
        }, py::arg("dtype") = "int8",
           "Give every Linear an int8 copy of its weight (one scale per output row) and run it in int8 from now on "
           "(no gradient through them, as torch's dynamic quantisation; the float32 parameters are kept). Returns self.")
        .def("dequantize", [](std::shared_ptr<Module> m) { m->dequantize(); return m; },
             "Drop the int8 copies: every Linear computes in float32 again. Returns self.")
        .def_property_readonly("quantization", [](const Module& m) -> py::object {
            const std::string q = m.quantization();
            return q.empty() ? py::none() : py::cast(q);
        }, "'int8' while some Linear is quantised, else None.")
        .def("train", [](std::shared_ptr<Module> m, bool mode) { m->train(mode); return m; }, py::arg("mode") = true)
        .def("eval", [](std::shared_ptr<Module> m) { m->eval(); return m; })
        .def_property_readonly("training", &Module::is_training)
        .def("zero_grad", &Module::zero_grad, "Set every parameter's gradient to None.")
        .def("num_parameters", &Module::num_parameters, "Number of parameter elements, tied weights once.")
        .def("__repr__", [](py::handle self) {
            dynamic(self);
            return module_repr(self.cast<const Module&>());
        });

    py::class_<Linear, Module, std::shared_ptr<Linear>>(nn, "Linear")
        .def(py::init([](ctpy::Int in_features, ctpy::Int out_features, bool bias) {
            const std::size_t in = to_size(in_features, "Linear: in_features");
            const std::size_t out = to_size(out_features, "Linear: out_features");
            py::gil_scoped_release release;
            return std::make_shared<Linear>(in, out, bias);
        }), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true)
        .def("forward", py::overload_cast<const Tensor&>(&Linear::forward, py::const_), py::arg("input"),
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("int8_weight", [](const Linear& l) -> py::object {
            if (!l.int8_weight()) return py::none();
            return py::cast(std::const_pointer_cast<ct::Int8Weight>(l.int8_weight()));
        }, "The weight in int8 (quantization.Int8Weight) while the module is quantised, else None.")
        .def("set_int8_weight", [](Linear& l, std::shared_ptr<ct::Int8Weight> w) { l.set_int8_weight(std::move(w)); },
             py::arg("weight"),
           "Quantise this Linear with the given int8 weight (a quantised checkpoint's), leaving the float32 weight as it is.")
        .def_readwrite("weight", &Linear::weight)
        .def_property_readonly("bias", [](const Linear& l) -> py::object {
            return l.has_bias ? py::cast(l.bias) : py::none();
        })
        .def_readonly("in_features", &Linear::in_features)
        .def_readonly("out_features", &Linear::out_features);

    auto embed = [](const Embedding& e, py::object ids) {
        ct::IndexArray idx = to_index_array(ids, "input");
        py::gil_scoped_release release;
        return e.forward(idx);
    };
    py::class_<Embedding, Module, std::shared_ptr<Embedding>>(nn, "Embedding",
                                                           "torch.nn.Embedding: a (num_embeddings, embedding_dim) table whose "
                                                           "rows the integer ids pick; the padding_idx row gets no gradient.")
        .def(py::init([](ctpy::Int num_embeddings, ctpy::Int embedding_dim, py::object padding_idx) {
            const std::size_t n = to_size(num_embeddings, "Embedding: num_embeddings");
            const std::size_t d = to_size(embedding_dim, "Embedding: embedding_dim");
            std::optional<std::int64_t> pad;
            if (!padding_idx.is_none()) pad = to_int(padding_idx, "Embedding: padding_idx");
            py::gil_scoped_release release;
            return std::make_shared<Embedding>(n, d, pad);
        }), py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none())
        .def("forward", embed, py::arg("input"))
        .def_readwrite("weight", &Embedding::weight)
        .def_readonly("num_embeddings", &Embedding::num_embeddings)
        .def_readonly("embedding_dim", &Embedding::embedding_dim)
        .def_readonly("padding_idx", &Embedding::padding_idx);

    py::class_<LayerNorm, Module, std::shared_ptr<LayerNorm>>(nn, "LayerNorm",
                                                           "torch.nn.LayerNorm over the last dimension (normalized_shape), "
                                                           "with a weight and a bias.")
        .def(py::init([](ctpy::Int normalized_shape, float eps) {
            const std::size_t d = to_size(normalized_shape, "LayerNorm: normalized_shape");
            return std::make_shared<LayerNorm>(d, eps);
        }), py::arg("normalized_shape"), py::arg("eps") = 1e-5)
        .def("forward", &LayerNorm::forward, py::arg("input"), py::call_guard<py::gil_scoped_release>())
        .def_readwrite("weight", &LayerNorm::weight)
        .def_readwrite("bias", &LayerNorm::bias)
        .def_readonly("eps", &LayerNorm::eps);

    py::class_<Dropout, Module, std::shared_ptr<Dropout>>(nn, "Dropout",
                                                       "torch.nn.Dropout: functional.dropout with probability p while the "
                                                       "module is training, the identity after eval().")
        .def(py::init<float>(), py::arg("p") = 0.5f)
        .def("forward", &Dropout::forward, py::arg("input"), py::call_guard<py::gil_scoped_release>())
        .def_readonly("p", &Dropout::p);
}

}  // namespace ctpy
