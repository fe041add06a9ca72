// Moved to ctransformer/runtime/tensor.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/tensor.hpp"
