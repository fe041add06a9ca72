// How many threads the library uses: OpenBLAS's products and ct's own kernels (softmax,
// layer_norm, elementwise, losses, Adam) alike.
#pragma once

namespace ct {

void set_num_threads(int n);
int get_num_threads();

}  // namespace ct
