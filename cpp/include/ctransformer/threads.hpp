// How many threads the BLAS products use.
#pragma once

namespace ct {

void set_num_threads(int n);
int get_num_threads();

}  // namespace ct
