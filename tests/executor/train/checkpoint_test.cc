// Checkpoints (executor/train/checkpoint.h): a save and load round trip, an interrupted save,
// corruption, and the reader's refusals of bad rank files and manifests, each naming the file.
#include "executor/train/checkpoint.h"

#include <gtest/gtest.h>

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
  SaveCheckpoint(dir_, {10, 80, 1234}, "layout A", params.span(), {m.span()}, groups_, *backend_);
  // A later save that died after writing its rank file but before the manifest and `latest`.
  std::filesystem::create_directories(dir_ / "step-00000020");
  std::ofstream(dir_ / "step-00000020" / "rank-00000.bin") << "partial";
  Tensor p2 = Make(*backend_, {3}, {}), m2 = Make(*backend_, {3}, {});
  const CheckpointState s =
      LoadCheckpoint(dir_, "layout A", p2.span(), {m2.span()}, groups_, *backend_);
  EXPECT_EQ(s.step, 10);
  EXPECT_EQ(s.sequences_consumed, 80);
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
  SaveCheckpoint(dir_, {1, 8, 1}, "L", params.span(), {}, groups_, *backend_);
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
      "format: ptdp-checkpoint\nversion: 1\nstep: 8\nsequences_consumed: 64\nseed: 1\n"
      "world_size: 2\nlayout: \"tp 1 | name: \\\"x\\\"\"\n",
      "m.yaml");
  EXPECT_EQ(m.state.step, 8);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.layout, "tp 1 | name: \"x\"");
  const std::pair<std::string, std::string> cases[] = {
      {"format: other\nversion: 1\n", "not a ptdp checkpoint manifest"},
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
  SaveCheckpoint(dir_, {2, 16, 1}, "L", params.span(), {}, groups_, *backend_);
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
  expect_refused("step=2\nsequences_consumed=16\nseed=1\nrank=1\ntensor0_bytes=4\nlayout=L\n",
                 "holds rank 1's state, not rank 0's");
  expect_refused("step=1\nsequences_consumed=8\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
                 "is from step 1, but the manifest is step 2");
  // The same header as the save's loads.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << HandMadeRankFile(
      "step=2\nsequences_consumed=16\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
      std::string("\0\0\xc0\x40", 4));
  EXPECT_EQ(LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_).step, 2);
  EXPECT_EQ(Host(*backend_, params.span()), (std::vector<float>{6}));
}

}  // namespace
}  // namespace ptdp
