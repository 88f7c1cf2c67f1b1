#include "core/training_spec.h"

namespace ptdp {

std::string_view Name(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

std::string_view Name(Optimizer o) { return o == Optimizer::kAdam ? "adam" : "sgd"; }

int BytesPerElement(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

}  // namespace ptdp
