// What each product runs at the level in force (ctransformer/kernels/level.hpp): the one place a kernel is
// chosen. The products ask on every call (an atomic load), so set_kernel_level takes effect at the next one.
#pragma once
#include <string>

#include "ctransformer/kernels/level.hpp"

namespace ct::kernels {

// The float32 products of our own: a few rows of x W^T (kernels/fp32/few_rows.cpp) and decoding's packed weights
// (kernels/fp32/packed.cpp). Blas: neither; OpenBLAS does them.
enum class FloatKernel { Blas, Avx2, Avx512 };
enum class Int8Kernel { Portable, Avx2, AvxVnni, Avx512Vnni, AmxInt8, Dotprod, I8mm, Neon };
enum class Bf16Kernel { Emulated, Avx512Bf16, AmxBf16, NeonBf16 };

FloatKernel float_kernel_at(Level level);
Int8Kernel int8_kernel_at(Level level);
Bf16Kernel bf16_kernel_at(Level level);

FloatKernel float_kernel();
Int8Kernel int8_kernel();
Bf16Kernel bf16_kernel();

std::string kernel_name(FloatKernel k);
std::string kernel_name(Int8Kernel k);
std::string kernel_name(Bf16Kernel k);

// One product's own choice, whatever the level, until the next set_kernel_level (set_int8_kernel and
// set_bf16_kernel; their callers check that the CPU runs it).
void choose_int8_kernel(Int8Kernel k);
void choose_bf16_kernel(Bf16Kernel k);
void follow_level_for_int8();
void follow_level_for_bf16();

}  // namespace ct::kernels
