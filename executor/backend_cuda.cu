// Placeholder until the CUDA backend lands (branch `cuda`): the factory answers that there is
// no CUDA backend yet, so that the CUDA build links.
#include "executor/backend_cuda.h"

namespace ptdp {

std::unique_ptr<Backend> MakeCudaBackend(int, std::string* error) {
  *error = "the CUDA backend is not built yet";
  return nullptr;
}

CudaMemoryFigures CudaMemory(const Backend&) { return {}; }

void Synchronize(Backend&) {}

}  // namespace ptdp
