// NcclComm on a one-rank communicator (ctest label gpu): every Comm method against the obvious
// result, through NCCL's own calls (a one-rank NcclComm does not take LocalComm's shortcuts).
// Skips, saying why, where no CUDA device is usable (CI has none).
#include "executor/comm/nccl.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "executor/backend/cuda.h"
#include "executor/backend/device.h"
#include "executor/backend/half.h"

namespace ptdp {
namespace {

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaStatus status = QueryCuda();
    if (!status.usable) GTEST_SKIP() << "no usable GPU: " << status.reason;
    std::string error;
    backend_ = MakeCudaBackend(0, &error);
    ASSERT_NE(backend_, nullptr) << error;
    NcclOptions options;
    options.timeout_s = 60;
    // One rank: the exchange is the identity (rank 0's own id).
    comm_ = MakeNcclWorld(
        *backend_, 0, 1, [](const std::string& id) { return id; }, options, &error);
    ASSERT_NE(comm_, nullptr) << error;
  }

  Tensor Make(DType dtype, const std::vector<float>& values) {
    Tensor t(*backend_, dtype, {static_cast<int64_t>(values.size())}, MemCategory::kWorkspace);
    Tensor f(*backend_, DType::kF32, {static_cast<int64_t>(values.size())},
             MemCategory::kWorkspace);
    backend_->Upload(f.span(), values.data());
    backend_->Convert(t.span(), f.span());
    return t;
  }
  std::vector<float> Read(const Tensor& t) {
    Tensor f(*backend_, DType::kF32, {t.numel()}, MemCategory::kWorkspace);
    backend_->Convert(f.span(), t.span());
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend_->Download(f.span(), out.data());
    return out;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Comm> comm_;
};

TEST_F(NcclOneRank, CollectivesOnEveryDtype) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  const std::vector<float> v = {1, -2, 3.5, 4};
  for (const DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(Name(dtype)));
    Tensor a = Make(dtype, v);
    comm_->AllReduce(a.span(), ReduceOp::kSum);
    EXPECT_EQ(Read(a), v);
    comm_->AllReduce(a.span(), ReduceOp::kMax);
    EXPECT_EQ(Read(a), v);
    Tensor out(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->AllGather(a.span(), out.span());
    EXPECT_EQ(Read(out), v);
    Tensor rs(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->ReduceScatter(a.span(), rs.span());
    EXPECT_EQ(Read(rs), v);
    Tensor aa(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->AllToAll(a.span(), aa.span());
    EXPECT_EQ(Read(aa), v);
    Tensor av(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->AllToAllV(a.span(), {4}, av.span(), {4});
    EXPECT_EQ(Read(av), v);
    Tensor gv(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->AllGatherV(a.span(), gv.span(), {4});
    EXPECT_EQ(Read(gv), v);
    Tensor sv(*backend_, dtype, {4}, MemCategory::kWorkspace);
    comm_->ReduceScatterV(a.span(), sv.span(), {4});
    EXPECT_EQ(Read(sv), v);
    comm_->Broadcast(a.span(), 0);
    EXPECT_EQ(Read(a), v);
  }
  // int32 moves as NCCL's int32.
  Tensor ids(*backend_, DType::kI32, {3}, MemCategory::kWorkspace);
  const int32_t host[3] = {7, -1, 2147483647};
  backend_->Upload(ids.span(), host);
  comm_->AllReduce(ids.span(), ReduceOp::kSum);
  int32_t back[3] = {};
  backend_->Download(ids.span(), back);
  EXPECT_EQ(std::vector<int32_t>(back, back + 3), std::vector<int32_t>(host, host + 3));
}

// The overlapped collectives (--overlap-grad-reduce, --overlap-param-gather, the asynchronous
// input-gradient reduction) run on the communicator's own stream: a kernel queued on the
// compute stream before the start is seen by the exchange, and one after Wait() sees its
// result; Test() turns true once the exchange is done.
TEST_F(NcclOneRank, StartedCollectivesOrderWithTheComputeStream) {
  const std::vector<float> v = {1, -2, 3.5, 4}, doubled = {2, -4, 7, 8};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(Name(dtype)));
    Tensor a = Make(dtype, v);
    backend_->Scale(a.span(), 2.0);  // queued before the start: the exchange moves 2 v
    Tensor gathered(*backend_, dtype, {4}, MemCategory::kWorkspace);
    Tensor scattered(*backend_, dtype, {4}, MemCategory::kWorkspace);
    auto reduce = comm_->StartAllReduce(a.span());
    reduce->Wait();
    auto gather = comm_->StartAllGather(a.span(), gathered.span());
    auto scatter = comm_->StartReduceScatter(a.span(), scattered.span());
    gather->Wait();
    scatter->Wait();
    EXPECT_EQ(Read(a), doubled);
    EXPECT_EQ(Read(gathered), doubled);
    EXPECT_EQ(Read(scattered), doubled);
    Synchronize(*backend_);
    EXPECT_TRUE(reduce->Test());
    EXPECT_TRUE(gather->Test());
  }
}

TEST_F(NcclOneRank, HostHelpersBarrierAndSplits) {
  EXPECT_EQ(comm_->AllReduceHost(2.5, ReduceOp::kSum), 2.5);
  EXPECT_EQ(comm_->AllReduceHost(-1.0, ReduceOp::kMax), -1.0);
  EXPECT_EQ(comm_->GatherStrings("gpu-node-17", 0), std::vector<std::string>{"gpu-node-17"});
  EXPECT_EQ(comm_->GatherStrings("", 0), std::vector<std::string>{""});
  comm_->Barrier();
  EXPECT_EQ(comm_->Split(-1, 0), nullptr);
  std::unique_ptr<Comm> sub = comm_->Split(3, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  Tensor a = Make(DType::kF32, {5, 6});
  sub->AllReduce(a.span(), ReduceOp::kSum);
  EXPECT_EQ(Read(a), (std::vector<float>{5, 6}));
}

// Point-to-point messages need a ring neighbour, which a one-rank group does not have (the
// pair communicators are tested with two GPUs: results/cluster).
TEST_F(NcclOneRank, PointToPointNeedsANeighbour) {
  Tensor a = Make(DType::kF32, {1, 2, 3});
  try {
    comm_->Isend(a.span(), 0, 5);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("between ring neighbours only"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ptdp
