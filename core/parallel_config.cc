#include "core/parallel_config.h"

#include "core/error.h"
#include "core/training_spec.h"

namespace ptdp {

int64_t NumMicrobatches(const TrainingSpec& training, const ParallelConfig& parallel) {
  const int64_t per_step = int64_t{parallel.micro_batch_size} * parallel.dp;
  PTDP_CHECK(per_step > 0 && training.global_batch_size % per_step == 0);
  return training.global_batch_size / per_step;
}

}  // namespace ptdp
