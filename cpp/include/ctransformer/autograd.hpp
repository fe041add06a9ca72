// Moved to ctransformer/runtime/autograd.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/autograd.hpp"
