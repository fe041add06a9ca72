// Moved to ctransformer/runtime/random.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/random.hpp"
