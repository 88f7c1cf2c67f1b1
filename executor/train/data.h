// Training data: byte-level tokens (vocabulary 256, token = byte value) from a text file, or a
// synthetic stream. Everything is a pure function of (seed, sequence number), so the data
// position in a checkpoint is one counter and every layout sees the same sequences:
//  - the file is split deterministically: the first 90% of its bytes train, the last 10% are
//    held out for validation;
//  - training sequence n is the S + 1 bytes starting at a position drawn uniformly from the
//    training split by the counter-based stream (seed, "data.train") at index n;
//  - step k consumes sequences [k * GBS, (k + 1) * GBS); data-parallel rank d takes the
//    contiguous block [d * GBS / dp, (d + 1) * GBS / dp) of them (Megatron's sampler) and cuts
//    it into micro-batches of MBS sequences.
// Synthetic sequence n is an arithmetic progression modulo the vocabulary, with start and
// stride drawn from (seed, n): learnable from context, and needs no file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

inline constexpr const char* kDefaultDataFile = "/usr/share/common-licenses/GPL-3";
inline constexpr int kByteVocabulary = 256;

class TokenData {
 public:
  // Reads `path` (InputError naming it when unreadable or too short for `seq_length`).
  static TokenData FromFile(const std::string& path, int seq_length, uint64_t seed);
  static TokenData Synthetic(int vocab_size, uint64_t seed);

  // Tokens of training sequence n: S + 1 values (inputs are the first S, targets the last S).
  void TrainSequence(uint64_t n, int seq_length, int32_t* out) const;
  // Validation sequence i (0 <= i < validation_sequences(S)): consecutive non-overlapping
  // windows of the held-out split.
  void ValidationSequence(uint64_t i, int seq_length, int32_t* out) const;
  int64_t validation_sequences(int seq_length) const;

  const std::string& description() const { return description_; }  // for progress and results
  int64_t train_bytes() const { return train_end_; }
  bool synthetic() const { return synthetic_; }

 private:
  std::string description_;
  bool synthetic_ = false;
  int vocab_ = kByteVocabulary;
  uint64_t seed_ = 0;
  std::vector<uint8_t> bytes_;
  int64_t train_end_ = 0;  // bytes [0, train_end_) train, the rest validate
};

}  // namespace ptdp
