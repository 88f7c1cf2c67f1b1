// Checkpoints (executor/train/checkpoint.h): a save and load round trip, an interrupted save,
// corruption, and the reader's refusals of bad rank files and manifests, each naming the file;
// run identity: a rank file of another run refused, format version 1 still loading, a folder
// of another run refused before saving, the save lock and a failed write naming its holder.
#include "executor/train/checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/comm/topology.h"
#include "executor/model/rng.h"

namespace ptdp {
namespace {

constexpr char kRunA[] = "0123456789abcdef0123456789abcdef";
constexpr char kRunB[] = "fedcba9876543210fedcba9876543210";

std::string ThisHost() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) return "unknown";
  return host.data();
}

std::vector<float> Host(Backend& b, Span s) {
  std::vector<float> out(static_cast<size_t>(s.numel));
  b.Download(s, out.data());
  return out;
}

Tensor Make(Backend& b, std::vector<int64_t> shape, std::vector<float> values,
            MemCategory category = MemCategory::kWorkspace) {
  Tensor t(b, DType::kF32, std::move(shape), category);
  if (!values.empty()) b.Upload(t.span(), values.data());
  return t;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ptdp-ckpt-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    backend_ = MakeCpuBackend();
    groups_ = MakeProcessGroups(MakeLocalComm(*backend_), ParallelConfig{});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  ProcessGroups groups_;
};

TEST_F(CheckpointTest, RoundTripsAndAnInterruptedSaveLeavesThePreviousOne) {
  Tensor params = Make(*backend_, {3}, {1, 2, 3});
  Tensor m = Make(*backend_, {3}, {4, 5, 6});
  SaveCheckpoint(dir_, {10, 80, 1234, kRunA}, "layout A", params.span(), {m.span()}, groups_,
                 *backend_);
  // A later save that died after writing its rank file but before the manifest and `latest`.
  std::filesystem::create_directories(dir_ / "step-00000020");
  std::ofstream(dir_ / "step-00000020" / "rank-00000.bin") << "partial";
  Tensor p2 = Make(*backend_, {3}, {}), m2 = Make(*backend_, {3}, {});
  const CheckpointState s =
      LoadCheckpoint(dir_, "layout A", p2.span(), {m2.span()}, groups_, *backend_);
  EXPECT_EQ(s.step, 10);
  EXPECT_EQ(s.sequences_consumed, 80);
  EXPECT_EQ(s.run_id, kRunA);
  EXPECT_EQ(Host(*backend_, p2.span()), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Host(*backend_, m2.span()), (std::vector<float>{4, 5, 6}));
  try {
    LoadCheckpoint(dir_, "layout B", p2.span(), {m2.span()}, groups_, *backend_);
    ADD_FAILURE() << "a different layout loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("saved with a different model or layout"),
              std::string::npos);
  }
}

TEST_F(CheckpointTest, DetectsCorruption) {
  Tensor params = Make(*backend_, {3}, {1, 2, 3});
  SaveCheckpoint(dir_, {1, 8, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
  const auto file = dir_ / "step-00000001" / "rank-00000.bin";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) - 12));
  f.put('\x7f');
  f.close();
  try {
    LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
    ADD_FAILURE() << "a corrupt file loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos);
  }
}

// A rank file written by hand: magic, header, tensors, FNV-1a checksum (the format SaveCheckpoint
// writes), so that the reader's checks can be reached with any field.
std::string HandMadeRankFile(const std::string& header, const std::string& tensors) {
  std::string blob = "PTDPCKP1" + header + "\n" + tensors;
  const uint64_t sum = Fnv1a64(blob);
  blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  return blob;
}

TEST(CheckpointFile, ReadsItsHeaderAndTensors) {
  const std::string blob = HandMadeRankFile(
      "step=3\nsequences_consumed=24\nseed=7\nrank=1\ntensor0_bytes=4\ntensor1_bytes=8\n"
      "layout=L\n",
      "abcdefghijkl");
  const CheckpointRankFile f = ParseCheckpointRankFile(blob, "r.bin");
  EXPECT_EQ(f.state.step, 3);
  EXPECT_EQ(f.state.sequences_consumed, 24);
  EXPECT_EQ(f.state.seed, 7);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.layout, "L");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(blob.substr(f.tensors[0].first, f.tensors[0].second), "abcd");
  EXPECT_EQ(blob.substr(f.tensors[1].first, f.tensors[1].second), "efghijkl");
}

TEST(CheckpointFile, RefusesBadHeadersNamingTheFile) {
  const std::string good = "step=3\nsequences_consumed=24\nseed=7\nrank=0\ntensor0_bytes=4\n";
  const std::pair<std::string, std::string> cases[] = {
      {HandMadeRankFile("step=x3\nsequences_consumed=24\nseed=7\nrank=0\nlayout=L\n", ""),
       "the header's step is not a count: \"x3\""},
      {HandMadeRankFile("step=3\nsequences_consumed=24\nseed=7\nrank=-1\nlayout=L\n", ""),
       "the header's rank is not a count"},
      {HandMadeRankFile("step=3\nseed=7\nrank=0\nlayout=L\n", ""),
       "the header has no sequences_consumed"},
      {HandMadeRankFile(good + "layout=L\n", "ab"), "runs past the end of the file"},
      {HandMadeRankFile("step=3\nsequences_consumed=24\nseed=7\nrank=0\n"
                        "tensor0_bytes=99999999999999999999\nlayout=L\n",
                        "abcd"),
       "is not a count"},
      {HandMadeRankFile(good + "layout=L\n", "abcdef"), "2 bytes after the last tensor"},
      {HandMadeRankFile(good + "run=xyz\nlayout=L\n", "abcd"),
       "the header's run is not a run id (32 lowercase hex digits): \"xyz\""},
      {"PTDPCKP1step=3\nseed=1\n and more", "checksum mismatch"},
      {"PTDPCKP2 and more bytes", "not a ptdp checkpoint file"},
      {"", "not a ptdp checkpoint file"},
  };
  for (const auto& [blob, message] : cases) {
    try {
      (void)ParseCheckpointRankFile(blob, "dir/rank-00000.bin");
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().source, "dir/rank-00000.bin");
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointFile, ManifestIsStrictYaml) {
  const CheckpointManifest m = ParseCheckpointManifest(
      "format: ptdp-checkpoint\nversion: 2\nrun: 0123456789abcdef0123456789abcdef\nstep: 8\n"
      "sequences_consumed: 64\nseed: 1\nworld_size: 2\nlayout: \"tp 1 | name: \\\"x\\\"\"\n",
      "m.yaml");
  EXPECT_EQ(m.state.step, 8);
  EXPECT_EQ(m.state.run_id, kRunA);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.layout, "tp 1 | name: \"x\"");
  // Format version 1 (before run ids) still reads, without a run id.
  const CheckpointManifest v1 = ParseCheckpointManifest(
      "format: ptdp-checkpoint\nversion: 1\nstep: 8\nsequences_consumed: 64\nseed: 1\n"
      "world_size: 2\nlayout: L\n",
      "m.yaml");
  EXPECT_EQ(v1.state.run_id, "");
  const std::pair<std::string, std::string> cases[] = {
      {"format: other\nversion: 1\n", "not a ptdp checkpoint manifest"},
      {"format: ptdp-checkpoint\nversion: 3\n",
       "this ptdp reads checkpoint format versions 1 and 2, got 3"},
      {"format: ptdp-checkpoint\nversion: 2\nstep: 1\nsequences_consumed: 1\nseed: 1\n"
       "world_size: 1\nlayout: L\n",
       "run"},
      {"format: ptdp-checkpoint\nversion: 2\nrun: 0123ABCD\nstep: 1\n",
       "expected a run id (32 lowercase hex digits), got \"0123ABCD\""},
      {"format: ptdp-checkpoint\nversion: 1\nrun: 0123456789abcdef0123456789abcdef\nstep: 1\n"
       "sequences_consumed: 1\nseed: 1\nworld_size: 1\nlayout: L\n",
       "run"},
      {"format: ptdp-checkpoint\nversion: 1\nstep: -1\n", "must not be negative"},
      {"format: ptdp-checkpoint\nversion: 1\nstep: 1\nsequences_consumed: 1\nseed: 1\n"
       "world_size: 1\nlayout: L\nextra: 1\n",
       "extra"},
      {"[unclosed", "m.yaml"},
  };
  for (const auto& [text, message] : cases) {
    try {
      (void)ParseCheckpointManifest(text, "m.yaml");
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST_F(CheckpointTest, RefusesAnotherRanksFileAndAStaleFile) {
  Tensor params = Make(*backend_, {1}, {5});
  SaveCheckpoint(dir_, {2, 16, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
  const auto file = dir_ / "step-00000002" / "rank-00000.bin";
  auto expect_refused = [&](const std::string& header, const std::string& message) {
    float value = 5;
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        << HandMadeRankFile(header, std::string(reinterpret_cast<const char*>(&value), 4));
    try {
      LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
      ADD_FAILURE() << "loaded; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().source, file.string());
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const std::string run_a = std::string("run=") + kRunA + "\n";
  expect_refused(
      "step=2\nsequences_consumed=16\nseed=1\nrank=1\n" + run_a + "tensor0_bytes=4\nlayout=L\n",
      "holds rank 1's state, not rank 0's");
  expect_refused(
      "step=1\nsequences_consumed=8\nseed=1\nrank=0\n" + run_a + "tensor0_bytes=4\nlayout=L\n",
      "is from step 1, but the manifest is step 2");
  // Another run's file of the same step, layout and seed: only the run id tells them apart.
  expect_refused(std::string("step=2\nsequences_consumed=16\nseed=1\nrank=0\nrun=") + kRunB +
                     "\ntensor0_bytes=4\nlayout=L\n",
                 std::string("written by run ") + kRunB + ", the manifest is run " + kRunA +
                     "'s: two runs saved into this folder");
  expect_refused("step=2\nsequences_consumed=16\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
                 std::string("written by a run of checkpoint format version 1 (no run id), the "
                             "manifest is run ") +
                     kRunA + "'s");
  // The same header as the save's loads.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << HandMadeRankFile(
      "step=2\nsequences_consumed=16\nseed=1\nrank=0\n" + run_a + "tensor0_bytes=4\nlayout=L\n",
      std::string("\0\0\xc0\x40", 4));
  EXPECT_EQ(LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_).step, 2);
  EXPECT_EQ(Host(*backend_, params.span()), (std::vector<float>{6}));
}

TEST_F(CheckpointTest, AFormatVersion1CheckpointStillLoadsWithoutARunId) {
  std::filesystem::create_directories(dir_ / "step-00000002");
  std::ofstream(dir_ / "step-00000002" / "manifest.yaml")
      << "format: ptdp-checkpoint\nversion: 1\nstep: 2\nsequences_consumed: 16\nseed: 1\n"
         "world_size: 1\nlayout: L\n";
  std::ofstream(dir_ / "latest") << "step-00000002\n";
  const auto file = dir_ / "step-00000002" / "rank-00000.bin";
  std::ofstream(file, std::ios::binary) << HandMadeRankFile(
      "step=2\nsequences_consumed=16\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
      std::string("\0\0\xc0\x40", 4));
  Tensor params = Make(*backend_, {1}, {0});
  const CheckpointState s = LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.run_id, "");
  EXPECT_EQ(CheckpointRunId(dir_), "");
  EXPECT_EQ(Host(*backend_, params.span()), (std::vector<float>{6}));
  // Its folder is another run's for a new run saving there.
  try {
    CheckSaveFolder(dir_, "", false);
    ADD_FAILURE() << "a new run may save beside a format-1 checkpoint";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a run of checkpoint format version 1 (no run id)"),
              std::string::npos)
        << e.what();
  }
  // A rank file with a run id beside a version-1 manifest is another save's.
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << HandMadeRankFile(std::string("step=2\nsequences_consumed=16\nseed=1\nrank=0\nrun=") +
                              kRunB + "\ntensor0_bytes=4\nlayout=L\n",
                          std::string("\0\0\xc0\x40", 4));
  try {
    LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
    ADD_FAILURE() << "loaded another run's file";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().source, file.string());
    EXPECT_NE(std::string(e.what()).find(std::string("written by run ") + kRunB +
                                         ", the manifest is of checkpoint format version 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, AFolderOfAnotherRunIsRefusedUnlessTheRunMayReplaceIt) {
  Tensor params = Make(*backend_, {1}, {5});
  CheckSaveFolder(dir_, "", false);  // a missing folder
  std::filesystem::create_directories(dir_);
  CheckSaveFolder(dir_, "", false);  // an empty one
  SaveCheckpoint(dir_, {2, 16, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
  EXPECT_FALSE(std::filesystem::exists(dir_ / ".ptdp-save.lock"));  // released
  EXPECT_EQ(CheckpointRunId(dir_), kRunA);
  CheckSaveFolder(dir_, kRunA, false);  // its own run saves on
  CheckSaveFolder(dir_, kRunB, true);   // --save-overwrite, or resuming from the folder
  for (const std::string& run : {std::string(), std::string(kRunB)}) {
    try {
      CheckSaveFolder(dir_, run, false);
      ADD_FAILURE() << "another run may save here";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().source, dir_.string());
      EXPECT_EQ(e.where().key, "--save");
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("holds the checkpoints of run ") + kRunA +
                          " (step-00000002, which `latest` names), and this run is " +
                          (run.empty() ? "a new one" : "run " + run)),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("resume that run with --load " + dir_.string()), std::string::npos);
      EXPECT_NE(what.find("--save-overwrite"), std::string::npos);
    }
  }
  // Each save checks again (another run may have saved since this one started).
  EXPECT_THROW(SaveCheckpoint(dir_, {4, 32, 1, kRunB}, "L", params.span(), {}, groups_, *backend_),
               InputError);
  SaveOptions overwrite;
  overwrite.replace_other_runs = true;
  SaveCheckpoint(dir_, {4, 32, 1, kRunB}, "L", params.span(), {}, groups_, *backend_, overwrite);
  EXPECT_EQ(CheckpointRunId(dir_), kRunB);  // `latest` moved to run B's
  EXPECT_EQ(CheckpointRunId((dir_ / "step-00000002").string()), kRunA);

  EXPECT_TRUE(ResumesFromFolder(dir_, dir_));
  EXPECT_TRUE(ResumesFromFolder((dir_ / "step-00000002").string(), dir_));
  EXPECT_TRUE(ResumesFromFolder(dir_.string() + "/", dir_));
  EXPECT_FALSE(ResumesFromFolder((dir_ / "elsewhere").string(), dir_.string() + "-other"));
  EXPECT_FALSE(ResumesFromFolder("", dir_));
}

TEST_F(CheckpointTest, ASaveLockOfALiveJobIsRefusedAndADeadOnesTakenOver) {
  Tensor params = Make(*backend_, {1}, {5});
  std::filesystem::create_directories(dir_);
  const auto lock = dir_ / ".ptdp-save.lock";
  const std::string live = fmt::format("pid={}\nhost={}\nrun={}\n", ::getpid(), ThisHost(), kRunB);
  std::ofstream(lock) << live;
  try {
    SaveCheckpoint(dir_, {2, 16, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
    ADD_FAILURE() << "saved beside a live job's lock";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().source, lock.string());
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "another job is writing checkpoints here: pid {} on host {} (run {}) holds "
                  "this lock",
                  ::getpid(), ThisHost(), kRunB)),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(lock));  // not this save's to remove
  // A new run is told at start-up that a save is under way there.
  EXPECT_THROW(CheckSaveFolder(dir_, "", false), InputError);
  // A process of this host that is gone (a job killed in the middle of a save): taken over.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  std::ofstream(lock, std::ios::trunc)
      << fmt::format("pid={}\nhost={}\nrun={}\n", child, ThisHost(), kRunB);
  CheckSaveFolder(dir_, "", false);  // a dead holder is no other run
  SaveCheckpoint(dir_, {2, 16, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
  EXPECT_FALSE(std::filesystem::exists(lock));
  EXPECT_EQ(CheckpointRunId(dir_), kRunA);
  // One that has exited but is not reaped yet (a killed job's rank whose parent does not reap
  // it): a zombie runs nothing, taken over too.
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  ASSERT_GT(zombie, 0);
  siginfo_t exited{};
  for (int i = 0; i < 500 && exited.si_pid != zombie; ++i) {
    ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(zombie), &exited, WEXITED | WNOWAIT | WNOHANG), 0);
    if (exited.si_pid != zombie) ::usleep(10'000);
  }
  ASSERT_EQ(exited.si_pid, zombie);
  std::ofstream(lock, std::ios::trunc)
      << fmt::format("pid={}\nhost={}\nrun={}\n", zombie, ThisHost(), kRunB);
  SaveCheckpoint(dir_, {4, 32, 1, kRunA}, "L", params.span(), {}, groups_, *backend_);
  EXPECT_FALSE(std::filesystem::exists(lock));
  ::waitpid(zombie, nullptr, 0);
}

// Another job that removes this save's step folder (as its save removes a folder without a
// manifest) and holds the lock: the failed rename says why, with the rename's own error.
TEST_F(CheckpointTest, AFailedWriteNamesTheOtherJobWritingThere) {
  Tensor params = Make(*backend_, {1}, {5});
  SaveOptions options;
  options.fault_hook = [this](std::string_view phase) {
    if (phase != "rank file half written") return;
    std::filesystem::remove_all(dir_ / "step-00000002");
    std::ofstream(dir_ / ".ptdp-save.lock", std::ios::trunc)
        << "pid=4242\nhost=elsewhere\nrun=" << kRunB << "\n";
  };
  try {
    SaveCheckpoint(dir_, {2, 16, 1, kRunA}, "L", params.span(), {}, groups_, *backend_, options);
    ADD_FAILURE() << "saved into a removed folder";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().source, (dir_ / "step-00000002" / "rank-00000.bin").string());
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("cannot rename into place: No such file or directory; another job "
                              "is writing checkpoints here: pid 4242 on host elsewhere (run {}) "
                              "holds {}",
                              kRunB, (dir_ / ".ptdp-save.lock").string())),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ / ".ptdp-save.lock"));  // the other job's
}

TEST(CheckpointRunId, NewIdsAreRunIdsAndDiffer) {
  const std::string a = NewRunId(), b = NewRunId();
  EXPECT_TRUE(IsRunId(a));
  EXPECT_NE(a, b);
  EXPECT_FALSE(IsRunId("0123456789ABCDEF0123456789abcdef"));
  EXPECT_FALSE(IsRunId("0123456789abcdef"));
}

}  // namespace
}  // namespace ptdp
