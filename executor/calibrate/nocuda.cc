// Built when CUDA is absent: the CUDA measurement (cuda.h) throws, saying there is nothing to
// calibrate.
#include <stdexcept>

#include "executor/calibrate/cuda.h"

namespace ptdp {

CudaComputeFigures MeasureCudaCompute(const CudaCalibrateOptions&, std::ostream*) {
  throw std::runtime_error(
      "ptdp was built without CUDA (nvcc or NCCL not found at configure time): nothing to "
      "calibrate");
}

}  // namespace ptdp
