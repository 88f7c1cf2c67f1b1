// TrainingSpec: what is trained per step and how (batch, precision, optimizer).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/enum_names.h"

namespace ptdp {

enum class Precision { kBf16, kFp16, kFp32 };
enum class Optimizer { kAdam, kSgd };

inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}, {"fp32", Precision::kFp32}};
inline constexpr EnumName<Optimizer> kOptimizerNames[] = {{"adam", Optimizer::kAdam},
                                                          {"sgd", Optimizer::kSgd}};

inline std::string_view Name(Precision p) { return NameOf<Precision>(kPrecisionNames, p); }
inline std::string_view Name(Optimizer o) { return NameOf<Optimizer>(kOptimizerNames, o); }

// Bytes of one element of the training (compute) precision.
int BytesPerElement(Precision p);

// Optimizer hyper-parameters carry Megatron's argument names and defaults
// (megatron/training/arguments.py); lr has no Megatron default, ours is the founding
// document's 1e-4.
struct TrainingSpec {
  int64_t global_batch_size = 0;  // sequences per optimizer step, all data-parallel ranks
  Precision precision = Precision::kBf16;
  Optimizer optimizer = Optimizer::kAdam;
  double lr = 1e-4;
  double weight_decay = 0.01;
  double clip_grad = 1.0;  // global gradient-norm clip; 0 disables
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  int64_t seed = 1234;

  bool operator==(const TrainingSpec&) const = default;
};

}  // namespace ptdp
