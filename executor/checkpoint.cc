#include "executor/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/spec_yaml.h"
#include "executor/rng.h"

namespace ptdp {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'P', 'T', 'D', 'P', 'C', 'K', 'P', '1'};

std::string StepDirName(int64_t step) { return fmt::format("step-{:08d}", step); }
std::string RankFileName(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

InputError LoadError(const std::string& path, const std::string& message) {
  return InputError({path, 0, ""}, message, "checkpoints load into the layout that saved them");
}

// Writes `data` to `path` through `path.tmp`, flushed to disk, then renamed.
void WriteAtomically(const fs::path& path, const std::string& data) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw InputError({tmp.string(), 0, "--save"}, "cannot create the file");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw InputError({tmp.string(), 0, "--save"}, "write failed (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  fs::rename(tmp, path);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path.string(), "cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Header lines "key=value\n", then an empty line, then the tensors, then an FNV-1a checksum.
std::string Header(const CheckpointState& s, const std::string& layout, int rank,
                   const std::vector<int64_t>& sizes) {
  std::string h = fmt::format("step={}\nsequences_consumed={}\nseed={}\nrank={}\n", s.step,
                              s.sequences_consumed, s.seed, rank);
  for (size_t i = 0; i < sizes.size(); ++i) h += fmt::format("tensor{}_bytes={}\n", i, sizes[i]);
  h += "layout=" + layout + "\n\n";
  return h;
}

std::string Field(const std::string& header, const std::string& key, const std::string& file) {
  const std::string prefix = key + "=";
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  throw LoadError(file, "the header has no " + key);
}

fs::path ResolveStepDir(const std::string& dir) {
  const fs::path root(dir);
  if (fs::exists(root / "manifest.yaml")) return root;
  const fs::path latest = root / "latest";
  if (!fs::exists(latest)) {
    throw InputError({dir, 0, "--load"},
                     "no checkpoint here (neither a `latest` file nor a manifest.yaml)");
  }
  std::string name = ReadFile(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path step_dir = root / name;
  if (!fs::exists(step_dir / "manifest.yaml")) {
    throw LoadError((step_dir / "manifest.yaml").string(),
                    "the manifest that `latest` names is missing");
  }
  return step_dir;
}

}  // namespace

std::string CheckpointLayout(const Plan& plan, DType dtype) {
  const ParallelConfig& p = plan.parallel;
  std::string model = WriteModelYaml(plan.model);
  for (char& c : model) {
    if (c == '\n') c = ';';
  }
  // An uneven split changes which layers each rank holds; the even split's text is unchanged
  // so that earlier checkpoints still match.
  const std::string split =
      UnevenSplit(p) ? fmt::format(" split first {} last {} embedding {} loss {}",
                                   p.first_stage_layers, p.last_stage_layers,
                                   p.account_for_embedding ? 1 : 0, p.account_for_loss ? 1 : 0)
                     : "";
  // Context parallelism changes the distributed optimizer's shards (over dp x cp); cp 1 keeps
  // the earlier text.
  const std::string cp = p.cp > 1 ? fmt::format(" cp {}", p.cp) : "";
  // The expert grid decides which experts (and which of their slices) a rank holds and the
  // distributed optimizer's expert shards; dense models keep the earlier text.
  const std::string experts =
      plan.model.moe() ? fmt::format(" ep {} etp {}", p.ep, p.expert_tp()) : "";
  return fmt::format(
      "tp {} pp {} dp {}{}{} virtual_stages {}{} distributed_optimizer {} global_batch {} "
      "optimizer {} {} | {}",
      p.tp, p.pp, p.dp, cp, experts, p.virtual_stages, split, p.distributed_optimizer ? 1 : 0,
      plan.training.global_batch_size, Name(plan.training.optimizer), Name(dtype), model);
}

void SaveCheckpoint(const std::string& dir, const CheckpointState& state, const std::string& layout,
                    Span params, const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                    Backend& backend) {
  const fs::path step_dir = fs::path(dir) / StepDirName(state.step);
  if (groups.world->rank() == 0) {
    std::error_code ec;
    fs::create_directories(step_dir, ec);
    if (ec) throw InputError({step_dir.string(), 0, "--save"}, "cannot create: " + ec.message());
  }
  groups.world->Barrier();

  std::vector<Span> tensors{params};
  tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
  std::vector<int64_t> sizes;
  for (const Span& t : tensors) sizes.push_back(t.bytes());
  std::string blob(kMagic, sizeof(kMagic));
  blob += Header(state, layout, groups.world->rank(), sizes);
  for (const Span& t : tensors) {
    const size_t at = blob.size();
    blob.resize(at + static_cast<size_t>(t.bytes()));
    backend.Download(t, blob.data() + at);
  }
  const uint64_t sum = Fnv1a64(blob);
  blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  WriteAtomically(step_dir / RankFileName(groups.world->rank()), blob);
  groups.world->Barrier();  // every rank's file is in place

  if (groups.world->rank() == 0) {
    std::string manifest = fmt::format(
        "# ptdp checkpoint: one rank-NNNNN.bin per rank (ptdp execute --load {})\n"
        "format: ptdp-checkpoint\nversion: 1\nstep: {}\nsequences_consumed: {}\nseed: {}\n"
        "world_size: {}\nlayout: \"{}\"\n",
        dir, state.step, state.sequences_consumed, state.seed, groups.world->size(), layout);
    WriteAtomically(step_dir / "manifest.yaml", manifest);
    WriteAtomically(fs::path(dir) / "latest", StepDirName(state.step) + "\n");
  }
  groups.world->Barrier();  // committed before anyone moves on
}

CheckpointState LoadCheckpoint(const std::string& dir, const std::string& layout, Span params,
                               const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                               Backend& backend) {
  const fs::path step_dir = ResolveStepDir(dir);
  const std::string manifest = ReadFile(step_dir / "manifest.yaml");
  const std::string world = fmt::format("world_size: {}\n", groups.world->size());
  if (manifest.find(world) == std::string::npos) {
    throw LoadError((step_dir / "manifest.yaml").string(),
                    fmt::format("saved by a different number of ranks (this run has {})",
                                groups.world->size()));
  }
  const fs::path file = step_dir / RankFileName(groups.world->rank());
  const std::string blob = ReadFile(file);
  if (blob.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    throw LoadError(file.string(), "not a ptdp checkpoint file");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, blob.data() + blob.size() - sizeof(stored), sizeof(stored));
  if (Fnv1a64(std::string_view(blob.data(), blob.size() - sizeof(stored))) != stored) {
    throw LoadError(file.string(), "checksum mismatch: the file is corrupt or truncated");
  }
  const size_t header_end = blob.find("\n\n");
  PTDP_CHECK(header_end != std::string::npos);
  const std::string header = blob.substr(sizeof(kMagic), header_end + 2 - sizeof(kMagic));
  if (Field(header, "layout", file.string()) != layout) {
    throw LoadError(file.string(), "saved with a different model or layout:\n  saved: " +
                                       Field(header, "layout", file.string()) +
                                       "\n  now:   " + layout);
  }
  std::vector<Span> tensors{params};
  tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
  size_t at = header_end + 2;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t bytes =
        std::stoll(Field(header, fmt::format("tensor{}_bytes", i), file.string()));
    if (bytes != tensors[i].bytes() ||
        at + static_cast<size_t>(bytes) > blob.size() - sizeof(stored)) {
      throw LoadError(file.string(), fmt::format("tensor {} has {} bytes, expected {}", i, bytes,
                                                 tensors[i].bytes()));
    }
    backend.Upload(tensors[i], blob.data() + at);
    at += static_cast<size_t>(bytes);
  }
  CheckpointState s;
  s.step = std::stoll(Field(header, "step", file.string()));
  s.sequences_consumed = std::stoll(Field(header, "sequences_consumed", file.string()));
  s.seed = std::stoll(Field(header, "seed", file.string()));
  groups.world->Barrier();
  return s;
}

}  // namespace ptdp
