#include "core/training_spec.h"

namespace ptdp {

int BytesPerElement(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

}  // namespace ptdp
