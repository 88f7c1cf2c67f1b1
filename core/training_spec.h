// TrainingSpec: what is trained per step and how (batch, precision, optimizer).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/enum_names.h"

namespace ptdp {

// The training precision. fp8 is Megatron's --bf16 with --fp8-format hybrid: Transformer
// Engine runs the transformer layers' linear GEMMs in FP8 (E4M3 activations and weights, E5M2
// gradients) and everything else (weights, activations, attention, embedding, LM head) in bf16.
enum class Precision { kBf16, kFp16, kFp32, kFp8 };
// How FP8 tensors are scaled (--fp8-recipe): delayed (scales from an amax history, Megatron's
// default), tensorwise (current scaling: each tensor's own amax, one more pass over it), blockwise
// (128 x 128 weight and 1 x 128 activation blocks, DeepSeek-V3's recipe).
enum class Fp8Recipe { kDelayed, kTensorwise, kBlockwise };
enum class Optimizer { kAdam, kSgd };

inline constexpr EnumName<Precision> kPrecisionNames[] = {{"bf16", Precision::kBf16},
                                                          {"fp16", Precision::kFp16},
                                                          {"fp32", Precision::kFp32},
                                                          {"fp8", Precision::kFp8}};
inline constexpr EnumName<Fp8Recipe> kFp8RecipeNames[] = {{"delayed", Fp8Recipe::kDelayed},
                                                          {"tensorwise", Fp8Recipe::kTensorwise},
                                                          {"blockwise", Fp8Recipe::kBlockwise}};
inline constexpr EnumName<Optimizer> kOptimizerNames[] = {{"adam", Optimizer::kAdam},
                                                          {"sgd", Optimizer::kSgd}};

inline std::string_view Name(Precision p) { return NameOf<Precision>(kPrecisionNames, p); }
inline std::string_view Name(Optimizer o) { return NameOf<Optimizer>(kOptimizerNames, o); }
inline std::string_view Name(Fp8Recipe r) { return NameOf<Fp8Recipe>(kFp8RecipeNames, r); }

// Bytes of one element of the training precision's weights and activations: 2 for bf16, fp16
// and fp8 (whose tensors are bf16 outside the FP8 GEMMs), 4 for fp32.
int BytesPerElement(Precision p);

// Optimizer hyper-parameters carry Megatron's argument names and defaults
// (megatron/training/arguments.py); lr has no Megatron default, ours is the founding
// document's 1e-4.
struct TrainingSpec {
  int64_t global_batch_size = 0;  // sequences per optimizer step, all data-parallel ranks
  Precision precision = Precision::kBf16;
  // FP8 only (precision fp8): --fp8-recipe; Megatron's --first-last-layers-bf16 with
  // --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 (0 and 0: off; the first and
  // last transformer layers of the model run their GEMMs in bf16); --fp8-param-gather (FP8
  // primary weights: no bf16 copy of the linear weights, all-gathered in FP8; needs the
  // distributed optimizer); --keep-fp8-transpose-cache (Megatron-FSDP sharding the
  // parameters keeps every FP8 weight's transpose, 1 byte per weight, instead of dropping it
  // after each module's forward and backward: megatron_fsdp.py release_module_parameters).
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  int fp8_bf16_layers_at_start = 0;
  int fp8_bf16_layers_at_end = 0;
  bool fp8_param_gather = false;
  bool keep_fp8_transpose_cache = false;
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
