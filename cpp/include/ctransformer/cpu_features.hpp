// Moved to ctransformer/runtime/cpu_features.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/cpu_features.hpp"
