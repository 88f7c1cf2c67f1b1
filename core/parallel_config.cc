#include "core/parallel_config.h"

#include "core/error.h"
#include "core/training_spec.h"

namespace ptdp {

int64_t NumMicrobatches(const TrainingSpec& training, const ParallelConfig& parallel) {
  const int64_t per_step = int64_t{parallel.micro_batch_size} * parallel.dp;
  PTDP_CHECK(per_step > 0 && training.global_batch_size % per_step == 0);
  return training.global_batch_size / per_step;
}

bool UnevenSplit(const ParallelConfig& p) {
  return p.first_stage_layers > 0 || p.last_stage_layers > 0 || p.account_for_embedding ||
         p.account_for_loss;
}

namespace {

// Layers of pipeline rank r over all its chunks (get_num_layers_to_build before the
// account-for adjustments of the first and last virtual stage).
int RankLayers(int num_layers, const ParallelConfig& p, int r) {
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    if (r == 0 && p.first_stage_layers > 0) return p.first_stage_layers;
    if (r == p.pp - 1 && p.last_stage_layers > 0) return p.last_stage_layers;
    int rest = num_layers, middle = p.pp;
    if (p.first_stage_layers > 0) rest -= p.first_stage_layers, --middle;
    if (p.last_stage_layers > 0) rest -= p.last_stage_layers, --middle;
    return middle > 0 ? rest / middle : 0;
  }
  return (num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0)) / p.pp;
}

}  // namespace

VirtualStages::VirtualStages(int num_layers, const ParallelConfig& p)
    : pp_(p.pp),
      last_vs_(p.pp * p.virtual_stages - 1),
      first_(RankLayers(num_layers, p, 0) / p.virtual_stages),
      middle_(p.pp > 2 ? RankLayers(num_layers, p, 1) / p.virtual_stages : 0),
      last_(RankLayers(num_layers, p, p.pp - 1) / p.virtual_stages),
      embedding_(p.account_for_embedding),
      loss_(p.account_for_loss) {
  row_ = p.pp == 1 ? first_ : first_ + (p.pp - 2) * middle_ + last_;
}

StageSlice VirtualStages::operator()(int vs) const {
  const int c = vs / pp_, r = vs - c * pp_;
  StageSlice s;
  s.layers = r == 0 ? first_ : r == pp_ - 1 ? last_ : middle_;
  // Layers before vs, in model order: c full rows of chunks, then ranks 0 .. r-1 of row c.
  s.first_layer = c * row_ + (r > 0 ? first_ + (r - 1) * middle_ : 0);
  if (embedding_) {
    if (vs == 0) --s.layers;
    if (vs > 0) --s.first_layer;
  }
  if (loss_ && vs == last_vs_) --s.layers;
  return s;
}

StageSlice VirtualStageLayers(int num_layers, const ParallelConfig& p, int vs) {
  return VirtualStages(num_layers, p)(vs);
}

LayerSplit SplitLayers(int num_layers, const ParallelConfig& p) {
  const int pp = p.pp, v = p.virtual_stages;
  PTDP_CHECK(pp >= 1 && v >= 1);
  LayerSplit split;
  split.layers.assign(static_cast<size_t>(pp) * v, 0);
  // Layers per pipeline rank (over its chunks), as get_num_layers_to_build computes them.
  std::vector<int> per_rank(pp);
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    int rest = num_layers, middle = pp;
    if (p.first_stage_layers > 0) rest -= p.first_stage_layers, --middle;
    if (p.last_stage_layers > 0) rest -= p.last_stage_layers, --middle;
    PTDP_CHECK(middle == 0 ? rest == 0 : rest >= 0 && rest % middle == 0);
    for (int r = 0; r < pp; ++r) per_rank[r] = middle > 0 ? rest / middle : 0;
    if (p.first_stage_layers > 0) per_rank[0] = p.first_stage_layers;
    if (p.last_stage_layers > 0) per_rank[pp - 1] = p.last_stage_layers;
  } else {
    const int total = num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
    PTDP_CHECK(total % pp == 0);
    for (int r = 0; r < pp; ++r) per_rank[r] = total / pp;
  }
  for (int r = 0; r < pp; ++r) {
    PTDP_CHECK(per_rank[r] % v == 0);
    for (int c = 0; c < v; ++c) split.layers[static_cast<size_t>(c) * pp + r] = per_rank[r] / v;
  }
  if (p.account_for_embedding) --split.layers.front();
  if (p.account_for_loss) --split.layers.back();
  split.first_layer.resize(split.layers.size());
  int next = 0;
  for (size_t vs = 0; vs < split.layers.size(); ++vs) {
    PTDP_CHECK(split.layers[vs] >= 0);
    split.first_layer[vs] = next;
    next += split.layers[vs];
  }
  PTDP_CHECK(next == num_layers);
  return split;
}

}  // namespace ptdp
