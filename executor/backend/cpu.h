// The CPU backend: host memory, OpenBLAS (cblas) matrix products, plain loops for the rest.
// It is the reference for every other backend: fp32 for training, fp64 for gradient checks.
#pragma once

#include <memory>

#include "executor/backend/backend.h"

namespace ptdp {

// `blas_threads` fixes OpenBLAS's thread count for the process (1 per MPI rank: ranks share the
// cores, and more threads per rank only oversubscribe them).
std::unique_ptr<Backend> MakeCpuBackend(int blas_threads = 1);

}  // namespace ptdp
