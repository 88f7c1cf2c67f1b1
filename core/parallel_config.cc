#include "core/parallel_config.h"

#include "core/error.h"
#include "core/training_spec.h"

namespace ptdp {

std::string_view Name(Schedule s) {
  switch (s) {
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::k1F1B:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
    case Schedule::kZbH1:
      return "zb-h1";
  }
  return "?";
}

std::string_view Name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

int64_t NumMicrobatches(const TrainingSpec& training, const ParallelConfig& parallel) {
  const int64_t per_step = int64_t{parallel.micro_batch_size} * parallel.dp;
  PTDP_CHECK(per_step > 0 && training.global_batch_size % per_step == 0);
  return training.global_batch_size / per_step;
}

}  // namespace ptdp
