#include "executor/comm/standin.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "executor/backend/cuda.h"

namespace ptdp {
namespace {

class StandInComm final : public Comm {
 public:
  StandInComm(Backend& backend, int rank, int size, StandInTally* tally)
      : backend_(backend), rank_(rank), size_(size), tally_(tally) {
    PTDP_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduce(Span data, ReduceOp) override {
    Tallied(data.bytes(), [] {});
  }
  void AllGather(Span in, Span out) override {
    PTDP_CHECK(out.numel == in.numel * size_ && in.dtype == out.dtype);
    Tallied(out.bytes(), [&] {
      if (in.numel == 0) return;
      for (int i = 0; i < size_; ++i) backend_.Copy(out.Slice(i * in.numel, in.numel), in);
    });
  }
  void ReduceScatter(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel * size_ && in.dtype == out.dtype);
    Tallied(in.bytes(), [&] {
      if (out.numel > 0) backend_.Copy(out, in.Slice(rank_ * out.numel, out.numel));
    });
  }
  void AllToAll(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel && in.numel % size_ == 0);
    Tallied(in.bytes(), [&] {
      if (in.numel > 0) backend_.Copy(out, in);
    });
  }
  void AllToAllV(Span in, const std::vector<int64_t>& send_counts, Span out,
                 const std::vector<int64_t>& recv_counts) override {
    PTDP_CHECK(static_cast<int>(send_counts.size()) == size_ &&
               static_cast<int>(recv_counts.size()) == size_);
    Tallied(in.bytes(), [&] {
      int64_t from = 0, to = 0;
      for (int j = 0; j < size_; ++j) {
        const auto k = static_cast<size_t>(j);
        const int64_t n = std::min(send_counts[k], recv_counts[k]);
        if (n > 0) backend_.Copy(out.Slice(to, n), in.Slice(from, n));
        from += send_counts[k];
        to += recv_counts[k];
      }
      PTDP_CHECK(from == in.numel && to == out.numel);
    });
  }
  void AllGatherV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(static_cast<int>(counts.size()) == size_);
    Tallied(out.bytes(), [&] {
      int64_t at = 0;
      for (const int64_t count : counts) {
        const int64_t n = std::min(count, in.numel);
        if (n > 0) backend_.Copy(out.Slice(at, n), in.Slice(0, n));
        at += count;
      }
      PTDP_CHECK(at == out.numel);
    });
  }
  void ReduceScatterV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(static_cast<int>(counts.size()) == size_);
    Tallied(in.bytes(), [&] {
      int64_t at = 0;
      for (int j = 0; j < rank_; ++j) at += counts[static_cast<size_t>(j)];
      PTDP_CHECK(counts[static_cast<size_t>(rank_)] == out.numel);
      if (out.numel > 0) backend_.Copy(out, in.Slice(at, out.numel));
    });
  }
  void Broadcast(Span data, int root) override {
    PTDP_CHECK(root >= 0 && root < size_);
    Tallied(data.bytes(), [] {});
  }
  void Barrier() override {}
  std::unique_ptr<CommRequest> Isend(Span data, int peer, int) override {
    PTDP_CHECK(peer >= 0 && peer < size_ && peer != rank_);
    Tallied(data.bytes(), [] {});
    return std::make_unique<DoneRequest>();
  }
  void Recv(Span data, int peer, int) override {
    PTDP_CHECK(peer >= 0 && peer < size_ && peer != rank_);
    Tallied(0, [&] {
      if (data.numel > 0) backend_.Fill(data, 0);
    });
    tally_->received_bytes += static_cast<double>(data.bytes());
  }
  int max_tag() const override { return 1 << 20; }
  std::unique_ptr<Comm> Split(int, int) override {
    throw InternalError(
        "a stand-in group cannot be split: MakeStandInGroups makes every group of the plan");
  }
  std::vector<std::string> GatherStrings(const std::string& mine, int root) override {
    PTDP_CHECK(root >= 0 && root < size_);
    return {mine};
  }
  double AllReduceHost(double value, ReduceOp) override { return value; }

 private:
  // Runs the stand-in copies of one operation carrying `bytes`, timed to their end.
  template <typename Copies>
  void Tallied(int64_t bytes, Copies&& copies) {
    const auto start = std::chrono::steady_clock::now();
    copies();
    Synchronize(backend_);
    tally_->seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tally_->bytes += static_cast<double>(bytes);
    ++tally_->calls;
  }

  Backend& backend_;
  int rank_, size_;
  StandInTally* tally_;
};

}  // namespace

StandInTallies PerMeasuredStep(const std::vector<StandInTallies>& at_end) {
  StandInTallies out;
  if (at_end.empty()) return out;
  const StandInTallies none;
  const StandInTallies& from = at_end.size() > 1 ? at_end.front() : none;
  const double steps = at_end.size() > 1 ? static_cast<double>(at_end.size() - 1) : 1.0;
  for (const auto& [group, end] : at_end.back()) {
    const auto begin = from.find(group);
    const StandInTally before = begin == from.end() ? StandInTally{} : begin->second;
    out[group] = {static_cast<int64_t>(static_cast<double>(end.calls - before.calls) / steps),
                  (end.bytes - before.bytes) / steps,
                  (end.received_bytes - before.received_bytes) / steps,
                  (end.seconds - before.seconds) / steps};
  }
  return out;
}

ProcessGroups MakeStandInGroups(int rank, const ParallelConfig& p, Backend& backend,
                                StandInTallies* tallies) {
  const int world = static_cast<int>(p.world_size());
  PTDP_CHECK(rank >= 0 && rank < world && tallies != nullptr);
  // Each group's size and this rank's place in it: the ranks that share its color, ordered by
  // key (then world rank, as MPI_Comm_split orders ties).
  const std::array<GroupSplit, kNumGroups> mine = GroupSplitsOf(rank, p);
  std::array<int, kNumGroups> size{}, below{};
  for (int r = 0; r < world; ++r) {
    const std::array<GroupSplit, kNumGroups> theirs = GroupSplitsOf(r, p);
    for (size_t g = 0; g < theirs.size(); ++g) {
      if (mine[g].color < 0 || theirs[g].color != mine[g].color) continue;
      ++size[g];
      if (theirs[g].key < mine[g].key || (theirs[g].key == mine[g].key && r < rank)) ++below[g];
    }
  }
  ProcessGroups groups;
  groups.coords = CoordsOf(rank, p);
  groups.expert_coords = ExpertCoordsOf(rank, p);
  groups.world = std::make_unique<StandInComm>(backend, rank, world, &(*tallies)["world"]);
  for (int i = 0; i < kNumGroups; ++i) {
    const auto g = static_cast<size_t>(i);
    if (mine[g].color < 0) continue;
    const auto id = static_cast<GroupId>(i);
    Member(groups, id) =
        std::make_unique<StandInComm>(backend, below[g], size[g], &(*tallies)[Name(id)]);
  }
  return groups;
}

}  // namespace ptdp
