#include "executor/model/gpt_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "executor/backend/half.h"
#include "executor/model/rng.h"

namespace ptdp {
namespace {

constexpr double kInitStd = 0.02;  // Megatron's --init-method-std default

// Indices into infos_ of one layer's parameters, in LayerParams order.
struct LayerIndices {
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
  int ln2_w = -1, ln2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  bool moe = false;
  int router_w = -1;
  std::vector<std::pair<int, int>> experts;  // fc1, fc2 of each local expert
};

// Indices into infos_ of one chunk's parameters (-1: absent).
struct ChunkIndices {
  int word = -1, position = -1, final_w = -1, final_b = -1, output = -1;
  std::vector<LayerIndices> layers;
};

// Declares the parameters one rank holds, chunk by chunk in the order Megatron builds them: each
// one's ParamInfo (its shape, its slice of the full model, its initialisation, the chunk and
// backward part it belongs to) appended to `infos`, and each chunk's indices into them.
class ParamDeclarer {
 public:
  ParamDeclarer(const GptDims& d, const ModelSpec& model, const ParallelConfig& parallel,
                RankCoords coords, std::vector<ParamInfo>& infos)
      : d_(d),
        model_(model),
        parallel_(parallel),
        coords_(coords),
        // The experts this rank holds: its place on the expert grid (executor/comm/topology.h).
        expert_(ExpertCoordsOf(WorldRankOf(coords, parallel), parallel)),
        first_expert_(expert_.ep * d.experts_local),
        infos_(infos) {}

  int64_t first_expert() const { return first_expert_; }

  // Chunk `chunk` of this pipeline rank: its place in the model (cp's virtual stage, embedding,
  // head and first layer), then its parameters.
  ChunkIndices Chunk(int chunk, ChunkParams& cp) {
    ChunkIndices ci;
    chunk_ = chunk;
    cp.virtual_stage = chunk * parallel_.pp + coords_.pp;
    cp.has_embedding = cp.virtual_stage == 0;
    cp.has_head = cp.virtual_stage == d_.virtual_stages - 1;
    cp.first_layer = d_.split.first_layer[static_cast<size_t>(cp.virtual_stage)];
    const int64_t chunk_layers = d_.split.layers[static_cast<size_t>(cp.virtual_stage)];
    part_ = kEmbeddingPart;
    if (cp.has_embedding) {
      ci.word = WordEmbedding(false);
      if (!d_.rotary) {
        ci.position = Replicated("embedding.position", d_.max_positions, d_.hidden,
                                 InitKind::kNormal, kInitStd, true);
      }
    }
    for (int64_t l = 0; l < chunk_layers; ++l) ci.layers.push_back(Layer(cp.first_layer + l));
    if (cp.has_head) {
      part_ = kHeadPart;
      Norm("final_ln", &ci.final_w, &ci.final_b);
      if (!d_.tied) {
        ci.output = ByRows("output_layer.weight", d_.vocab_padded, d_.hidden, InitKind::kNormal,
                           kInitStd, true);
        infos_[static_cast<size_t>(ci.output)].model_rows = d_.vocab;
      } else {
        if (!cp.has_embedding) ci.word = WordEmbedding(true);
        ci.output = ci.word;
      }
    }
    return ci;
  }

 private:
  // Layer `layer`: attention, then the MLP or the MoE layer's router, shared and local experts.
  LayerIndices Layer(int64_t layer) {
    const int64_t h = d_.hidden, qkv_rows = (d_.heads + 2 * d_.groups) * d_.head_dim;
    const int64_t attn = d_.heads * d_.head_dim;
    const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(d_.layers));
    const int64_t fc1_groups = d_.swiglu ? 2 : 1;
    const std::string p = fmt::format("layers.{}.", layer);
    part_ = static_cast<int>(layer);
    LayerIndices li;
    auto bias = [&](const std::string& name, int64_t rows, bool sharded, int64_t groups = 1) {
      if (!d_.biases) return -1;
      return sharded ? ByRows(p + name, rows, 1, InitKind::kZeros, 0, false, groups)
                     : Replicated(p + name, rows, 1, InitKind::kZeros, 0, false);
    };
    Norm(p + "ln1", &li.ln1_w, &li.ln1_b);
    li.qkv_w = ByRows(p + "attention.qkv.weight", qkv_rows, h, InitKind::kNormal, kInitStd, true);
    li.qkv_b = bias("attention.qkv.bias", qkv_rows, true);
    li.proj_w = ByCols(p + "attention.proj.weight", h, attn, out_std);
    li.proj_b = bias("attention.proj.bias", h, false);
    Norm(p + "ln2", &li.ln2_w, &li.ln2_b);
    li.moe = model_.IsMoeLayer(static_cast<int>(layer));
    if (!li.moe) {
      li.fc1_w = ByRows(p + "mlp.fc1.weight", fc1_groups * d_.ffn, h, InitKind::kNormal, kInitStd,
                        true, fc1_groups);
      li.fc1_b = bias("mlp.fc1.bias", fc1_groups * d_.ffn, true, fc1_groups);
      li.fc2_w = ByCols(p + "mlp.fc2.weight", h, d_.ffn, out_std);
      li.fc2_b = bias("mlp.fc2.bias", h, false);
      return li;
    }
    // MoE layers have no biases (CheckExecutable refuses add_bias_linear with experts).
    PTDP_CHECK(!d_.biases);
    li.router_w =
        Replicated(p + "mlp.router.weight", d_.experts, h, InitKind::kNormal, kInitStd, true);
    if (d_.shared_ffn > 0) {
      li.fc1_w = ByRows(p + "mlp.shared_experts.fc1.weight", fc1_groups * d_.shared_ffn, h,
                        InitKind::kNormal, kInitStd, true, fc1_groups);
      li.fc2_w = ByCols(p + "mlp.shared_experts.fc2.weight", h, d_.shared_ffn, out_std);
    }
    for (int64_t e = first_expert_; e < first_expert_ + d_.experts_local; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      const int fc1 = ByRows(x + "fc1.weight", fc1_groups * d_.expert_ffn, h, InitKind::kNormal,
                             kInitStd, true, fc1_groups, d_.etp, expert_.etp);
      const int fc2 = ByCols(x + "fc2.weight", h, d_.expert_ffn, out_std, d_.etp, expert_.etp);
      for (const int i : {fc1, fc2}) infos_[static_cast<size_t>(i)].expert = true;
      li.experts.push_back({fc1, fc2});
    }
    return li;
  }

  int Replicated(std::string name, int64_t rows, int64_t cols, InitKind init, double std, bool wd) {
    ParamInfo p;
    p.name = std::move(name);
    p.full_rows = p.model_rows = p.local_rows = rows;
    p.full_cols = p.local_cols = cols;
    p.init = init;
    p.init_std = std;
    p.weight_decay = wd;
    p.tp_duplicate = true;
    p.sequence_parallel_grad = parallel_.sequence_parallel;
    p.chunk = chunk_;
    p.part = part_;
    return Add(std::move(p));
  }

  // Split over `parts` ranks (TP, or the expert TP group), this rank holding part `index`.
  int ByRows(std::string name, int64_t rows, int64_t cols, InitKind init, double std, bool wd,
             int64_t row_groups = 1, int64_t parts = 0, int64_t index = -1) {
    if (parts == 0) parts = d_.tp, index = coords_.tp;
    ParamInfo p;
    p.name = std::move(name);
    p.full_rows = p.model_rows = rows;
    p.full_cols = p.local_cols = cols;
    p.shard = ShardDim::kRows;
    p.row_groups = row_groups;
    p.local_rows = rows / parts;
    p.row_begin = index * (p.local_rows / row_groups);
    p.init = init;
    p.init_std = std;
    p.weight_decay = wd;
    p.chunk = chunk_;
    p.part = part_;
    return Add(std::move(p));
  }

  int ByCols(std::string name, int64_t rows, int64_t cols, double std, int64_t parts = 0,
             int64_t index = -1) {
    if (parts == 0) parts = d_.tp, index = coords_.tp;
    ParamInfo p;
    p.name = std::move(name);
    p.full_rows = p.model_rows = p.local_rows = rows;
    p.full_cols = cols;
    p.shard = ShardDim::kCols;
    p.local_cols = cols / parts;
    p.col_begin = index * p.local_cols;
    p.init = InitKind::kNormal;
    p.init_std = std;
    p.weight_decay = true;
    p.chunk = chunk_;
    p.part = part_;
    return Add(std::move(p));
  }

  int WordEmbedding(bool shared) {
    const int i =
        ByRows("embedding.word", d_.vocab_padded, d_.hidden, InitKind::kNormal, kInitStd, true);
    infos_[static_cast<size_t>(i)].model_rows = d_.vocab;
    infos_[static_cast<size_t>(i)].tied_embedding = d_.tied;
    infos_[static_cast<size_t>(i)].shared_copy = shared;
    return i;
  }

  // Norm weight and (LayerNorm) bias; -1 for an absent bias.
  void Norm(const std::string& name, int* w, int* b) {
    *w = Replicated(name + ".weight", d_.hidden, 1, InitKind::kOnes, 0, false);
    *b = d_.rmsnorm ? -1 : Replicated(name + ".bias", d_.hidden, 1, InitKind::kZeros, 0, false);
  }

  int Add(ParamInfo info) {
    infos_.push_back(std::move(info));
    return static_cast<int>(infos_.size()) - 1;
  }

  const GptDims& d_;
  const ModelSpec& model_;
  const ParallelConfig& parallel_;
  const RankCoords coords_;
  const ExpertCoords expert_;
  const int64_t first_expert_;
  std::vector<ParamInfo>& infos_;
  int chunk_ = 0;              // the chunk being declared
  int part_ = kEmbeddingPart;  // and its backward part (a layer, the embedding or the head)
};

}  // namespace

GptDims MakeGptDims(const ModelSpec& model, const ParallelConfig& parallel, int tp_rank) {
  GptDims d;
  d.layers = model.num_layers;
  d.hidden = model.hidden_size;
  d.heads = model.num_attention_heads;
  d.head_dim = model.kv_channels;
  d.ffn = model.ffn_hidden_size;
  d.seq = model.seq_length;
  d.max_positions = model.max_position_embeddings;
  d.groups = model.num_query_groups;
  d.swiglu = model.activation == Activation::kSwiglu;
  d.rmsnorm = model.normalization == Normalization::kRmsNorm;
  d.rotary = model.position_embedding == PositionEmbedding::kRope;
  d.tied = model.tied_embeddings;
  d.biases = model.add_bias_linear;
  d.vocab = model.vocab_size;
  d.vocab_padded = PaddedVocabSize(model, parallel.tp);
  d.tp = parallel.tp;
  PTDP_CHECK(d.heads % d.tp == 0 && d.ffn % d.tp == 0 && d.vocab_padded % d.tp == 0);
  PTDP_CHECK(d.groups > 0 && d.heads % d.groups == 0 && d.groups % d.tp == 0);
  d.heads_local = d.heads / d.tp;
  d.groups_local = d.groups / d.tp;
  d.ffn_local = d.ffn / d.tp;
  d.vocab_local = d.vocab_padded / d.tp;
  d.vocab_begin = tp_rank * d.vocab_local;
  d.vocab_valid_local = std::clamp<int64_t>(d.vocab - d.vocab_begin, 0, d.vocab_local);
  d.virtual_stages = int64_t{parallel.pp} * parallel.virtual_stages;
  d.split = SplitLayers(model.num_layers, parallel);
  d.ep = parallel.ep;
  d.etp = parallel.expert_tp();
  if (model.moe()) {
    d.experts = model.num_experts;
    d.topk = model.moe_router_topk;
    d.expert_ffn = model.moe_ffn_hidden_size;
    d.shared_ffn = model.moe_shared_expert_intermediate_size;
    PTDP_CHECK(d.topk >= 1 && d.topk <= d.experts && d.experts % d.ep == 0);
    PTDP_CHECK(d.expert_ffn % d.etp == 0 && d.shared_ffn % d.tp == 0);
    d.experts_local = d.experts / d.ep;
    d.expert_ffn_local = d.expert_ffn / d.etp;
    d.shared_ffn_local = d.shared_ffn / d.tp;
  }
  return d;
}

GptParams::GptParams(const ModelSpec& model, const ParallelConfig& parallel, RankCoords coords,
                     DType dtype, Backend& backend, int64_t pad_multiple,
                     int64_t expert_pad_multiple)
    : dims_(MakeGptDims(model, parallel, coords.tp)),
      coords_(coords),
      dtype_(dtype),
      backend_(backend) {
  ParamDeclarer declare(dims_, model, parallel, coords, infos_);
  std::vector<ChunkIndices> indices(static_cast<size_t>(parallel.virtual_stages));
  chunks_.resize(indices.size());
  for (int chunk = 0; chunk < parallel.virtual_stages; ++chunk) {
    indices[static_cast<size_t>(chunk)] = declare.Chunk(chunk, chunks_[static_cast<size_t>(chunk)]);
  }
  LayOut(pad_multiple, expert_pad_multiple);

  // Each chunk's parameters: the declared indices resolved into the buffers.
  auto ref = [&](int i) { return i < 0 ? ParamRef{} : Ref(infos_[static_cast<size_t>(i)]); };
  for (size_t c = 0; c < chunks_.size(); ++c) {
    ChunkParams& cp = chunks_[c];
    const ChunkIndices& ci = indices[c];
    cp.word = ref(ci.word);
    cp.position = ref(ci.position);
    cp.final_ln_w = ref(ci.final_w);
    cp.final_ln_b = ref(ci.final_b);
    cp.output = ref(ci.output);
    for (const LayerIndices& li : ci.layers) {
      LayerParams lp{ref(li.ln1_w),  ref(li.ln1_b),  ref(li.qkv_w), ref(li.qkv_b),
                     ref(li.proj_w), ref(li.proj_b), ref(li.ln2_w), ref(li.ln2_b),
                     ref(li.fc1_w),  ref(li.fc1_b),  ref(li.fc2_w), ref(li.fc2_b)};
      lp.moe = li.moe;
      lp.router_w = ref(li.router_w);
      for (const auto& [fc1, fc2] : li.experts) lp.experts.push_back({ref(fc1), ref(fc2)});
      lp.first_expert = declare.first_expert();
      cp.layers.push_back(std::move(lp));
    }
  }
}

// The dense parameters first, then the experts', each range padded to its multiple.
void GptParams::LayOut(int64_t pad_multiple, int64_t expert_pad_multiple) {
  PTDP_CHECK(pad_multiple >= 1 && expert_pad_multiple >= 1);
  int64_t total = 0;
  for (const bool experts : {false, true}) {
    const int64_t begin = total;
    for (ParamInfo& p : infos_) {
      if (p.expert != experts) continue;
      p.numel = p.local_rows * p.local_cols;
      p.offset = total;
      total += p.numel;
      used_numel_ += p.numel;
    }
    const int64_t multiple = experts ? expert_pad_multiple : pad_multiple;
    total = begin + (total - begin + multiple - 1) / multiple * multiple;
    (experts ? expert_ : dense_) = {begin, total - begin};
  }
  values_ = Tensor(backend_, dtype_, {total}, MemCategory::kWeights);
  grads_ = Tensor(backend_, MainDType(dtype_), {total}, MemCategory::kGradients);
}

int64_t FullRow(const ParamInfo& p, int64_t local_row) {
  if (p.shard != ShardDim::kRows || p.row_groups == 1) return p.row_begin + local_row;
  const int64_t per_group = p.local_rows / p.row_groups;  // of this rank, in each block
  return local_row / per_group * (p.full_rows / p.row_groups) + p.row_begin + local_row % per_group;
}

ParamRef GptParams::Ref(const ParamInfo& info) const {
  return {values_.span().Slice(info.offset, info.numel),
          grads_.span().Slice(info.offset, info.numel)};
}

void GptParams::Initialize(uint64_t seed) {
  for (const ParamInfo& p : infos_) {
    std::vector<double> host(static_cast<size_t>(p.numel));
    const RngStream rng(seed, p.name);
    for (int64_t r = 0; r < p.local_rows; ++r) {
      for (int64_t c = 0; c < p.local_cols; ++c) {
        const int64_t full = FullRow(p, r) * p.full_cols + p.col_begin + c;
        double v = 0;
        if (p.init == InitKind::kOnes) v = 1;
        if (p.init == InitKind::kNormal) v = p.init_std * rng.Normal(static_cast<uint64_t>(full));
        host[static_cast<size_t>(r * p.local_cols + c)] = v;
      }
    }
    const Span dst = Ref(p).value;
    if (dtype_ == DType::kF64) {
      backend_.Upload(dst, host.data());
    } else if (Is16Bit(dtype_)) {
      // Megatron builds the model in fp32 and casts it (Float16Module): round each value once
      // to fp32 and once to 16 bits.
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) {
        const auto f = static_cast<float>(host[i]);
        bits[i] = dtype_ == DType::kBF16 ? FloatToBf16(f) : FloatToHalf(f);
      }
      backend_.Upload(dst, bits.data());
    } else {
      std::vector<float> f(host.begin(), host.end());
      backend_.Upload(dst, f.data());
    }
  }
  backend_.Fill(grads_.span(), 0);
}

namespace {

// Wire format of one rank's slices: per parameter, header then values as doubles.
struct SliceHeader {
  char name[96];
  int64_t full_rows, full_cols, model_rows, row_begin, col_begin, local_rows, local_cols;
  int64_t row_groups, shard;
};

std::vector<double> DownloadAsDouble(Backend& backend, Span s) {
  std::vector<double> out(static_cast<size_t>(s.numel));
  if (s.dtype == DType::kF64) {
    backend.Download(s, out.data());
  } else if (Is16Bit(s.dtype)) {
    std::vector<uint16_t> bits(out.size());
    backend.Download(s, bits.data());
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = s.dtype == DType::kBF16 ? Bf16ToFloat(bits[i]) : HalfToFloat(bits[i]);
    }
  } else {
    std::vector<float> f(out.size());
    backend.Download(s, f.data());
    std::copy(f.begin(), f.end(), out.begin());
  }
  return out;
}

}  // namespace

std::map<std::string, std::vector<double>> GatherFullParameters(const GptParams& params,
                                                                ProcessGroups& groups,
                                                                Backend& backend) {
  std::string mine;
  const bool dense_copy = groups.coords.dp == 0 && groups.coords.cp == 0;
  const bool expert_copy = groups.expert_coords.edp == 0;
  for (const ParamInfo& p : params.infos()) {
    if (p.shared_copy || !(p.expert ? expert_copy : dense_copy)) continue;
    SliceHeader h{};
    PTDP_CHECK(p.name.size() < sizeof(h.name));
    std::memcpy(h.name, p.name.data(), p.name.size());
    h.full_rows = p.full_rows;
    h.full_cols = p.full_cols;
    h.model_rows = p.model_rows;
    h.row_begin = p.row_begin;
    h.col_begin = p.col_begin;
    h.local_rows = p.local_rows;
    h.local_cols = p.local_cols;
    h.row_groups = p.row_groups;
    h.shard = static_cast<int64_t>(p.shard);
    const std::vector<double> values = DownloadAsDouble(backend, params.Ref(p).value);
    mine.append(reinterpret_cast<const char*>(&h), sizeof(h));
    mine.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  }
  const std::vector<std::string> all = groups.world->GatherStrings(mine, 0);
  std::map<std::string, std::vector<double>> full;
  for (const std::string& blob : all) {
    size_t pos = 0;
    while (pos < blob.size()) {
      SliceHeader h;
      std::memcpy(&h, blob.data() + pos, sizeof(h));
      pos += sizeof(h);
      std::vector<double>& dst = full[h.name];
      if (dst.empty()) dst.assign(static_cast<size_t>(h.model_rows * h.full_cols), 0.0);
      for (int64_t r = 0; r < h.local_rows; ++r) {
        for (int64_t c = 0; c < h.local_cols; ++c) {
          double v;
          std::memcpy(&v, blob.data() + pos + sizeof(double) * (r * h.local_cols + c), sizeof(v));
          ParamInfo info;
          info.shard = static_cast<ShardDim>(h.shard);
          info.row_groups = h.row_groups;
          info.row_begin = h.row_begin;
          info.local_rows = h.local_rows;
          info.full_rows = h.full_rows;
          const int64_t row = FullRow(info, r);
          if (row < h.model_rows) {
            dst[static_cast<size_t>(row * h.full_cols + h.col_begin + c)] = v;
          }
        }
      }
      pos += sizeof(double) * static_cast<size_t>(h.local_rows * h.local_cols);
    }
  }
  return full;
}

}  // namespace ptdp
