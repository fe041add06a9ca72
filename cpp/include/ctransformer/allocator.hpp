// Moved to ctransformer/runtime/allocator.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/allocator.hpp"
