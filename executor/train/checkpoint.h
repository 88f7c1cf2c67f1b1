// Checkpoints: one file per rank plus a manifest, committed atomically.
//
// Layout of a save directory DIR:
//   DIR/step-00000010/rank-00003.bin   this rank's parameters (its flat buffer) and optimizer
//                                      state, step, data position, RNG seed and run id,
//                                      checksummed
//   DIR/step-00000010/manifest.yaml    layout, step and run id; written after every rank's file
//   DIR/latest                         "step-00000010": the commit point
//   DIR/.ptdp-save.lock                while a save is under way (see below)
// Each file is written under a temporary name and renamed; `latest` moves only after the
// manifest, so a crash in the middle of a save leaves the previous checkpoint (the one `latest`
// names) intact; the next save removes what it left (a step folder without a manifest). DIR
// must be a directory every rank can reach (a shared file system when the ranks span machines).
// Loading needs the same model, tp, pp, dp, cp, ep, etp, virtual stages, distributed optimizer
// setting, global batch, seed and precision as the saving run (no resharding).
//
// Run identity: every run has a run id, 32 lowercase hex digits (128 random bits) made by world
// rank 0 when the run starts, or, when it resumes from a checkpoint, that checkpoint's: resuming
// continues the same run. The id is in the manifest and in every rank file, and a rank file
// whose id is not its manifest's is refused on load, so a folder into which two runs saved (one
// killed in the middle of a save over the other's step) never loads as a mix of the two. A run
// does not save into a folder holding another run's checkpoints unless told to
// (CheckSaveFolder: `ptdp execute --save-overwrite`, or resuming from that folder).
//
// Format versions: the manifest's `version: 2` has the run id (`run:`), as each rank file's
// header has (`run=`). Version 1 (before run ids) still loads: the run that resumes from it gets
// a new id; a version-1 manifest beside a rank file with a run id (or the reverse) is refused
// as two runs' files.
//
// The save lock: world rank 0 creates DIR/.ptdp-save.lock (O_CREAT | O_EXCL; "pid=P", "host=H",
// "run=R" lines) before it touches the folder and removes it after `latest` moves. A save that
// finds the lock held fails, naming the holder. A lock whose holder is a process of this host
// that no longer runs (a job killed in the middle of a save) is taken over; one from another
// host cannot be checked and stays until a person removes it (the error says so).
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
  std::string run_id = {};         // the run that saved it (IsRunId); "" for format version 1
};

// A new run id: 128 bits from std::random_device as 32 lowercase hex digits.
std::string NewRunId();
// Whether `text` is a run id: 32 lowercase hex digits.
bool IsRunId(std::string_view text);

// What must match between the saving and the loading run, as text (compared on load).
std::string CheckpointLayout(const Plan& plan, DType dtype);

// Fault injection for tests: called on each rank with "save begun" (before any rank writes),
// "rank file half written" (in the middle of writing its file) and "rank files written" (every
// rank's file in place, before the manifest).
using SaveFaultHook = std::function<void(std::string_view phase)>;

struct SaveOptions {
  // Save even where the folder holds other runs' checkpoints (--save-overwrite, or a run that
  // resumed from this folder); otherwise each save checks the folder again (CheckSaveFolder).
  bool replace_other_runs = false;
  SaveFaultHook fault_hook = {};
};

// Collective over groups.world. `params` is the rank's flat parameter buffer, `state` its
// optimizer tensors (TrainingOptimizer::state()); state.run_id must be a run id. World rank 0
// holds the save lock from before it touches `dir` until `latest` has moved. InputError naming
// the file for a lock held by another job, another run's checkpoints (unless
// options.replace_other_runs) and a failed write (naming the lock's holder when another job
// holds it).
void SaveCheckpoint(const std::string& dir, const CheckpointState& state, const std::string& layout,
                    Span params, const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                    Backend& backend, const SaveOptions& options = {});

// The path of `rank`'s file in the save of `step` in `dir` (for tests' fault injection).
std::string CheckpointRankFilePath(const std::string& dir, int64_t step, int rank);

// Before a run starts (every rank, before MPI): InputError naming `save_dir` (key --save) when
// it holds a checkpoint of a run other than `run_id` ("" for a new run: every checkpoint is
// another run's): a step folder's manifest (format version 1 counts as another run's), a
// `latest` file, or a save lock whose holder may still run; it names that run's id and the two
// ways out (resume that run with --load, or --save-overwrite). Nothing is checked when
// `replace_other_runs`. A missing or empty folder passes.
void CheckSaveFolder(const std::string& save_dir, const std::string& run_id,
                     bool replace_other_runs);

// Whether `load_dir` (what --load names: a save directory or one of its step directories) is
// in `save_dir`: the run resumes from the folder it saves into.
bool ResumesFromFolder(const std::string& load_dir, const std::string& save_dir);

// The run id of the checkpoint `dir` names (a save directory's `latest`, or a step directory);
// "" for format version 1. InputError naming the file when there is none or it does not read.
std::string CheckpointRunId(const std::string& dir);

// One rank's file as read from its bytes (no I/O), for LoadCheckpoint and the fuzz target.
struct CheckpointRankFile {
  CheckpointState state;
  int64_t rank = -1;
  std::string layout;
  std::vector<std::pair<size_t, size_t>> tensors;  // offset and size in bytes within the file
};
// InputError naming `file` for anything but a whole, uncorrupted file of this format: wrong
// magic, checksum mismatch (corrupt or truncated), a header without its fields or with a field
// that is not a non-negative integer, a `run` that is not a run id (format version 1 files have
// none: state.run_id ""), tensors that overrun the file.
CheckpointRankFile ParseCheckpointRankFile(std::string_view blob, const std::string& file);

// A step directory's manifest.yaml (written last, after every rank's file): format version 2
// (with `run`) or 1 (without).
struct CheckpointManifest {
  CheckpointState state;
  int64_t world_size = 0;
  std::string layout;
};
CheckpointManifest ParseCheckpointManifest(std::string_view text, const std::string& file);

// `dir` is a save directory (its `latest` is followed) or one step directory. Fills `params` and
// `optimizer_state` and returns the saved state. InputError naming the file for a missing,
// incomplete, corrupt or mismatched checkpoint: another model or layout, another rank count,
// a rank file of another rank (swapped files), of another save (a stale file) or of another
// run (two runs saved into the folder). Collective over groups.world.
CheckpointState LoadCheckpoint(const std::string& dir, const std::string& layout, Span params,
                               const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                               Backend& backend);

}  // namespace ptdp
