// The AVX-VNNI int8 kernel (kernel_ymm.inc with the VEX-encoded vpdpbusd): Intel Alder Lake and later,
// AMD Zen 5, where AVX-512 VNNI may be missing.
#include <algorithm>

#include "kernels.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#define CT_INT8_TARGET __attribute__((target("avx2,fma,avxvnni")))
#define CT_INT8_VNNI 1
#define CT_INT8_NAME avx_vnni
#include "kernel_ymm.inc"

#endif
