// Moved to ctransformer/runtime/threads.hpp (the runtime: cpp/src/runtime/); this path still works.
#pragma once
#include "ctransformer/runtime/threads.hpp"
