#include "executor/train/data.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "executor/model/rng.h"

namespace ptdp {

TokenData TokenData::FromFile(const std::string& path, int seq_length, uint64_t seed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError({"", 0, "--data"}, fmt::format("cannot read \"{}\"", path));
  TokenData d;
  d.bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  d.seed_ = seed;
  d.train_end_ = static_cast<int64_t>(d.bytes_.size()) * 9 / 10;
  if (d.train_end_ < seq_length + 1) {
    throw InputError({"", 0, "--data"},
                     fmt::format("\"{}\" has {} bytes; its training split (90%) needs at least "
                                 "seq_length + 1 = {}",
                                 path, d.bytes_.size(), seq_length + 1));
  }
  d.description_ = fmt::format("{} ({} bytes: {} train, {} validation)", path, d.bytes_.size(),
                               d.train_end_, d.bytes_.size() - d.train_end_);
  return d;
}

TokenData TokenData::Synthetic(int vocab_size, uint64_t seed) {
  TokenData d;
  d.synthetic_ = true;
  d.vocab_ = vocab_size;
  d.seed_ = seed;
  d.description_ = fmt::format("synthetic (arithmetic progressions modulo {})", vocab_size);
  return d;
}

void TokenData::TrainSequence(uint64_t n, int seq_length, int32_t* out) const {
  if (synthetic_) {
    const RngStream rng(seed_, "data.synthetic");
    const uint64_t start = rng.Below(2 * n, static_cast<uint64_t>(vocab_));
    const uint64_t stride = 1 + rng.Below(2 * n + 1, 7);
    for (int i = 0; i <= seq_length; ++i) {
      out[i] = static_cast<int32_t>((start + stride * static_cast<uint64_t>(i)) %
                                    static_cast<uint64_t>(vocab_));
    }
    return;
  }
  const RngStream rng(seed_, "data.train");
  const uint64_t begin = rng.Below(n, static_cast<uint64_t>(train_end_ - seq_length));
  for (int i = 0; i <= seq_length; ++i) out[i] = bytes_[begin + static_cast<uint64_t>(i)];
}

int64_t TokenData::validation_sequences(int seq_length) const {
  if (synthetic_) return 64;
  return (static_cast<int64_t>(bytes_.size()) - train_end_ - 1) / seq_length;
}

void TokenData::ValidationSequence(uint64_t i, int seq_length, int32_t* out) const {
  if (synthetic_) return TrainSequence(~uint64_t{0} / 2 - i, seq_length, out);
  PTDP_CHECK(static_cast<int64_t>(i) < validation_sequences(seq_length));
  const uint64_t begin = static_cast<uint64_t>(train_end_) + i * static_cast<uint64_t>(seq_length);
  for (int k = 0; k <= seq_length; ++k) out[k] = bytes_[begin + static_cast<uint64_t>(k)];
}

}  // namespace ptdp
