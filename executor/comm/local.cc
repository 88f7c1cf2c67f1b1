// The single-rank group: the reference (1, 1, 1) layout and tests run without MPI.
#include "core/error.h"
#include "executor/comm/comm.h"

namespace ptdp {
namespace {

class LocalComm final : public Comm {
 public:
  explicit LocalComm(Backend& backend) : backend_(backend) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduce(Span, ReduceOp) override {}
  void AllGather(Span in, Span out) override { backend_.Copy(out, in); }
  void ReduceScatter(Span in, Span out) override { backend_.Copy(out, in); }
  void AllToAll(Span in, Span out) override { backend_.Copy(out, in); }
  void AllToAllV(Span in, const std::vector<int64_t>& send_counts, Span out,
                 const std::vector<int64_t>& recv_counts) override {
    PTDP_CHECK(send_counts.size() == 1 && recv_counts.size() == 1);
    PTDP_CHECK(send_counts[0] == in.numel && recv_counts[0] == out.numel);
    if (in.numel > 0) backend_.Copy(out, in);
  }
  void AllGatherV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(counts.size() == 1 && counts[0] == in.numel);
    if (in.numel > 0) backend_.Copy(out, in);
  }
  void ReduceScatterV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(counts.size() == 1 && counts[0] == in.numel);
    if (in.numel > 0) backend_.Copy(out, in);
  }
  void Broadcast(Span, int root) override { PTDP_CHECK(root == 0); }
  void Barrier() override {}
  std::unique_ptr<CommRequest> Isend(Span, int, int) override {
    throw InternalError("LocalComm: a one-rank group has no peer to send to");
  }
  void Recv(Span, int, int) override {
    throw InternalError("LocalComm: a one-rank group has no peer to receive from");
  }
  int max_tag() const override { return 0; }
  std::unique_ptr<Comm> Split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_unique<LocalComm>(backend_);
  }
  std::vector<std::string> GatherStrings(const std::string& mine, int root) override {
    PTDP_CHECK(root == 0);
    return {mine};
  }
  double AllReduceHost(double value, ReduceOp) override { return value; }

 private:
  Backend& backend_;
};

}  // namespace

std::unique_ptr<Comm> MakeLocalComm(Backend& backend) {
  return std::make_unique<LocalComm>(backend);
}

}  // namespace ptdp
