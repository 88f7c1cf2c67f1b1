// Built when CUDA is absent: the NCCL communicator's factory (nccl.h), answering that there is
// no NCCL.
#include "executor/comm/nccl.h"

namespace ptdp {

std::unique_ptr<Comm> MakeNcclWorld(Backend&, int, int, const IdExchange&, const NcclOptions&,
                                    std::string* error) {
  *error = "ptdp was built without CUDA (nvcc or NCCL not found at configure time): no NCCL";
  return nullptr;
}

}  // namespace ptdp
