// Checkpoints: one file per rank plus a manifest, committed atomically.
//
// Layout of a save directory DIR:
//   DIR/step-00000010/rank-00003.bin   this rank's parameters (its flat buffer) and optimizer
//                                      state, step, data position and RNG seed, checksummed
//   DIR/step-00000010/manifest.yaml    layout and step; written after every rank's file
//   DIR/latest                         "step-00000010": the commit point
// Each file is written under a temporary name and renamed; `latest` moves only after the
// manifest, so a crash in the middle of a save leaves the previous checkpoint (the one `latest`
// names) intact; the next save removes what it left (a step folder without a manifest). DIR
// must be a directory every rank can reach (a shared file system when the ranks span machines).
// Loading needs the same model, tp, pp, dp, cp, ep, etp, virtual stages, distributed optimizer
// setting, global batch, seed and precision as the saving run (no resharding).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/plan.h"
#include "executor/backend/backend.h"
#include "executor/comm/topology.h"

namespace ptdp {

struct CheckpointState {
  int64_t step = 0;                // completed optimizer steps
  int64_t sequences_consumed = 0;  // data position: training sequences used so far
  int64_t seed = 0;                // the counter-based RNG's key (its only state)
};

// What must match between the saving and the loading run, as text (compared on load).
std::string CheckpointLayout(const Plan& plan, DType dtype);

// Fault injection for tests: called on each rank with "rank file half written" (in the middle
// of writing its file) and "rank files written" (every rank's file in place, before the
// manifest).
using SaveFaultHook = std::function<void(std::string_view phase)>;

// Collective over groups.world. `params` is the rank's flat parameter buffer, `state` its
// optimizer tensors (TrainingOptimizer::state()).
void SaveCheckpoint(const std::string& dir, const CheckpointState& state, const std::string& layout,
                    Span params, const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                    Backend& backend, const SaveFaultHook& fault_hook = {});

// One rank's file as read from its bytes (no I/O), for LoadCheckpoint and the fuzz target.
struct CheckpointRankFile {
  CheckpointState state;
  int64_t rank = -1;
  std::string layout;
  std::vector<std::pair<size_t, size_t>> tensors;  // offset and size in bytes within the file
};
// InputError naming `file` for anything but a whole, uncorrupted file of this format: wrong
// magic, checksum mismatch (corrupt or truncated), a header without its fields or with a field
// that is not a non-negative integer, tensors that overrun the file.
CheckpointRankFile ParseCheckpointRankFile(std::string_view blob, const std::string& file);

// A step directory's manifest.yaml (written last, after every rank's file).
struct CheckpointManifest {
  CheckpointState state;
  int64_t world_size = 0;
  std::string layout;
};
CheckpointManifest ParseCheckpointManifest(std::string_view text, const std::string& file);

// `dir` is a save directory (its `latest` is followed) or one step directory. Fills `params` and
// `optimizer_state` and returns the saved state. InputError naming the file for a missing,
// incomplete, corrupt or mismatched checkpoint: another model or layout, another rank count,
// a rank file of another rank (swapped files) or of another save (a stale file). Collective
// over groups.world.
CheckpointState LoadCheckpoint(const std::string& dir, const std::string& layout, Span params,
                               const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                               Backend& backend);

}  // namespace ptdp
