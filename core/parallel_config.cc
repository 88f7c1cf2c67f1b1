#include "core/parallel_config.h"

#include <fmt/format.h>

#include <cctype>

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
         p.account_for_loss || !p.layout.empty();
}

std::string ExpertGridText(const ParallelConfig& p, bool lower) {
  const int64_t stage = int64_t{p.tp} * p.cp * p.dp;
  const int64_t grid = int64_t{p.expert_tp()} * p.ep;
  const std::string edp = grid > 0 && stage % grid == 0 ? std::to_string(stage / grid) : "?";
  return lower ? fmt::format(" (experts: etp {} x ep {} x edp {})", p.expert_tp(), p.ep, edp)
               : fmt::format(" (experts: ETP {} x EP {} x EDP {})", p.expert_tp(), p.ep, edp);
}

std::string RecomputeModulesText(uint8_t modules, char separator) {
  std::string text;
  for (const auto& n : kRecomputeModuleNames) {
    if ((modules & n.value) == 0) continue;
    if (!text.empty()) text += separator;
    text += n.name;
  }
  return text;
}

uint8_t ParseRecomputeModules(std::string_view text, std::string* error) {
  uint8_t modules = 0;
  error->clear();
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = text.find_first_of(", +", i);
    const std::string_view name = text.substr(i, end == std::string_view::npos ? end : end - i);
    i = end == std::string_view::npos ? text.size() : end + 1;
    if (name.empty()) continue;
    const std::optional<uint8_t> bit = ValueOf<uint8_t>(kRecomputeModuleNames, name);
    if (!bit) {
      *error = UnknownValueMessage<uint8_t>(kRecomputeModuleNames, name);
      return 0;
    }
    modules |= *bit;
  }
  return modules;
}

namespace {
constexpr size_t kMaxLayoutChars = 1 << 20;
}  // namespace

PipelineLayout ParsePipelineLayout(std::string_view text) {
  PipelineLayout out;
  std::string s;
  for (char c : text) {
    if (c != ',' && c != ' ') s += c;
  }
  // Unroll "(...)*n" innermost first, then "x*n", as Megatron's regular expressions do.
  const auto unroll = [&](bool groups) {
    for (size_t star = s.find('*'); star != std::string::npos; star = s.find('*', star)) {
      size_t end = star + 1;
      while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
      // A layout names at most a few thousand layers: bound the count before unrolling it.
      if (end == star + 1 || star == 0 || end - star - 1 > 5) return false;
      const int n = std::stoi(s.substr(star + 1, end - star - 1));
      size_t begin = star - 1;
      std::string unit;
      if (s[begin] == ')') {
        if (!groups) return false;
        const size_t open = s.rfind('(', begin);
        if (open == std::string::npos) return false;
        unit = s.substr(open + 1, begin - open - 1);
        begin = open;
      } else {
        if (groups) {
          ++star;
          continue;
        }
        unit = s.substr(begin, 1);
      }
      if (unit.size() * static_cast<size_t>(n) > kMaxLayoutChars) return false;
      std::string repeated;
      for (int i = 0; i < n; ++i) repeated += unit;
      s = s.substr(0, begin) + repeated + s.substr(end);
      star = begin;
    }
    return true;
  };
  if (!unroll(true) || !unroll(false) || s.find_first_of("()*") != std::string::npos) {
    out.error = s.size() > kMaxLayoutChars
                    ? "the layout unrolls to more than a million layers"
                    : "cannot read the repetitions: write \"x*n\" or \"(...)*n\" (n below 100000)";
    return out;
  }
  int embeddings = 0, losses = 0, stage = 0;
  int mtp_stage = -1;
  bool after_mtp = false, decoder_after_mtp = false;
  out.layers.push_back(0);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '|') {
      out.layers.push_back(0);
      ++stage;
    } else if (c == 't') {
      ++out.layers.back();
      decoder_after_mtp |= after_mtp;
    } else if (c == 'm') {
      ++out.mtp;
      after_mtp = true;
      mtp_stage = stage;
    } else if (c == 'E') {
      if (i != 0) out.error = "The first layer must be embedding (E)";
      ++embeddings;
    } else if (c == 'L') {
      if (i != s.size() - 1) out.error = "The last layer must be loss (L)";
      ++losses;
    } else {
      out.error = fmt::format("Invalid layer character: {} (known: E, L, t, m)", c);
    }
  }
  if (!out.error.empty()) return out;
  if (embeddings != 1 || losses != 1) {
    out.error = "Embedding (E) and loss (L) must be specified exactly once";
  } else if (decoder_after_mtp) {
    out.error = "decoder layers must be placed before MTP layers";
  } else if (out.mtp > 0 && mtp_stage != stage) {
    out.error = "ptdp places MTP layers in the last virtual stage (with the loss)";
  }
  return out;
}

std::string PipelineLayoutText(const std::vector<int>& layers, int mtp) {
  const size_t n = layers.size();
  std::vector<std::string> stage(n);
  for (size_t i = 0; i < n; ++i) {
    stage[i] = (i == 0 ? "E" : "") + std::string(static_cast<size_t>(layers[i]), 't') +
               (i + 1 == n ? std::string(static_cast<size_t>(mtp), 'm') + "L" : "");
  }
  std::string out;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    if (i > 0) {
      while (j + 1 < n && stage[j] == stage[i]) ++j;
    }
    if (j - i > 1) {
      out += fmt::format("({}|)*{}", stage[i], j - i);
    } else {
      out += stage[i] + (i + 1 < n ? "|" : "");
    }
    i = j;
  }
  return out;
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
    : prefix_(p.layout.empty() ? std::vector<int>{} : std::vector<int>(p.layout.size() + 1, 0)),
      pp_(p.pp),
      last_vs_(p.pp * p.virtual_stages - 1),
      first_(RankLayers(num_layers, p, 0) / p.virtual_stages),
      middle_(p.pp > 2 ? RankLayers(num_layers, p, 1) / p.virtual_stages : 0),
      last_(RankLayers(num_layers, p, p.pp - 1) / p.virtual_stages),
      embedding_(p.account_for_embedding),
      loss_(p.account_for_loss) {
  row_ = p.pp == 1 ? first_ : first_ + (p.pp - 2) * middle_ + last_;
  for (size_t vs = 0; vs < p.layout.size(); ++vs) prefix_[vs + 1] = prefix_[vs] + p.layout[vs];
}

StageSlice VirtualStages::operator()(int vs) const {
  if (!prefix_.empty()) {
    return {prefix_[static_cast<size_t>(vs) + 1] - prefix_[static_cast<size_t>(vs)],
            prefix_[static_cast<size_t>(vs)]};
  }
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
  if (!p.layout.empty()) {
    PTDP_CHECK(static_cast<int>(p.layout.size()) == pp * v);
    split.layers = p.layout;
    split.first_layer.resize(split.layers.size());
    int next = 0;
    for (size_t vs = 0; vs < split.layers.size(); ++vs) {
      split.first_layer[vs] = next;
      next += split.layers[vs];
    }
    PTDP_CHECK(next == num_layers);
    return split;
  }
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
