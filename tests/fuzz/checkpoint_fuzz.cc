// Fuzz target: checkpoint metadata (executor/train/checkpoint.h): a rank file's header and tensor
// table, and a step's manifest.yaml. Random bytes rarely carry a valid checksum, so inputs whose
// first byte is odd get theirs appended (after the magic), and the fuzzer reaches the header
// reader behind it. A file that reads must describe tensors inside itself; anything but a result
// or an InputError naming the file is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "executor/model/rng.h"
#include "executor/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)ptdp::ParseCheckpointManifest(text, "manifest.yaml");
  } catch (const ptdp::InputError&) {
  }
  std::string blob(text);
  if (size > 0 && (data[0] & 1) != 0) {
    blob = "PTDPCKP1" + blob.substr(1);
    const uint64_t sum = ptdp::Fnv1a64(blob);
    blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  }
  try {
    const ptdp::CheckpointRankFile f = ptdp::ParseCheckpointRankFile(blob, "rank-00000.bin");
    size_t end = 0;
    for (const auto& [offset, bytes] : f.tensors) {
      if (offset < end || offset + bytes > blob.size()) __builtin_trap();
      end = offset + bytes;
    }
  } catch (const ptdp::InputError&) {
  }
  return 0;
}
