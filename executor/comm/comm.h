// The comm room (executor/comm/): how ranks exchange data: this interface, its MPI, NCCL,
// single-rank and stand-in implementations, and Megatron's process groups (topology.h); it
// builds on backend/ and launch/.
//
// Comm: collectives and point-to-point messages within one group of ranks (a communicator).
// The executor's groups (tensor, pipeline, data parallel, embedding; topology.h) are splits of
// the world. Implementations: MPI (mpi.h) on CPUs (and on GPUs through host copies), NCCL
// (nccl.h) on GPUs, a single-rank one (LocalComm) for one-process runs and tests.
//
// Buffers are backend memory (Span). Every rank of the group must call a collective with the
// same arguments in the same order; results are identical on every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executor/backend/backend.h"

namespace ptdp {

enum class ReduceOp { kSum, kMax };

// A posted non-blocking send or a started collective. Its buffers must stay alive and
// unchanged until Wait() returns or Test() returns true; after Wait() the backend's next kernels
// see the results (NCCL: the compute stream waits for the communication stream).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool Test() = 0;
  virtual void Wait() = 0;
};

// A request that completed when it was made.
class DoneRequest final : public CommRequest {
 public:
  bool Test() override { return true; }
  void Wait() override {}
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void AllReduce(Span data, ReduceOp op) = 0;  // in place
  // out.numel == in.numel * size(); rank i's `in` lands at out[i * in.numel, ...).
  virtual void AllGather(Span in, Span out) = 0;
  // in.numel == out.numel * size(); rank i gets the sum of every rank's in[i * out.numel, ...).
  virtual void ReduceScatter(Span in, Span out) = 0;
  // in.numel == out.numel, a multiple of size(): block j of `in` (numel / size() elements) goes
  // to rank j, and block i of `out` arrives from rank i (MPI_Alltoall).
  virtual void AllToAll(Span in, Span out) = 0;
  // Variable-size forms, for exchanges whose sizes depend on the data (the MoE token
  // dispatcher's): counts in elements, one per rank of the group, blocks contiguous in rank
  // order. AllToAllV: block j of `in` (send_counts[j] elements) goes to rank j and block i of
  // `out` (recv_counts[i]) arrives from rank i, which must send that many (MPI_Alltoallv).
  virtual void AllToAllV(Span in, const std::vector<int64_t>& send_counts, Span out,
                         const std::vector<int64_t>& recv_counts) = 0;
  // Rank i's `in` (counts[i] elements) lands at block i of `out` (MPI_Allgatherv).
  virtual void AllGatherV(Span in, Span out, const std::vector<int64_t>& counts) = 0;
  // Rank i gets the sum over the ranks of block i (counts[i] elements) of `in`
  // (MPI_Reduce_scatter).
  virtual void ReduceScatterV(Span in, Span out, const std::vector<int64_t>& counts) = 0;
  virtual void Broadcast(Span data, int root) = 0;
  virtual void Barrier() = 0;

  // Non-blocking forms of AllReduce (a sum), ReduceScatter and AllGather, for the data-parallel
  // exchanges that run beside the backward and the next forward (--overlap-grad-reduce,
  // --overlap-param-gather): NCCL runs them on a stream of their own; MPI progresses them inside
  // MPI calls and Test(). Every rank of the group starts the same exchanges in the same order.
  // These defaults run the blocking form and return a completed request.
  virtual std::unique_ptr<CommRequest> StartAllReduce(Span data) {
    AllReduce(data, ReduceOp::kSum);
    return std::make_unique<DoneRequest>();
  }
  virtual std::unique_ptr<CommRequest> StartReduceScatter(Span in, Span out) {
    ReduceScatter(in, out);
    return std::make_unique<DoneRequest>();
  }
  virtual std::unique_ptr<CommRequest> StartAllGather(Span in, Span out) {
    AllGather(in, out);
    return std::make_unique<DoneRequest>();
  }

  // Point-to-point; `peer` is a rank of this group; a message matches the receive with the same
  // peer and tag (0 <= tag < max_tag()).
  virtual std::unique_ptr<CommRequest> Isend(Span data, int peer, int tag) = 0;
  virtual void Recv(Span data, int peer, int tag) = 0;
  virtual int max_tag() const = 0;

  // Collective over this group: ranks with the same `color` form a new group, ordered by `key`;
  // a negative color returns nullptr (the rank joins no group).
  virtual std::unique_ptr<Comm> Split(int color, int key) = 0;

  // Host-side helpers for results and traces: every rank's string, on `root` only (others get
  // an empty vector); and a double all-reduce.
  virtual std::vector<std::string> GatherStrings(const std::string& mine, int root) = 0;
  virtual double AllReduceHost(double value, ReduceOp op) = 0;
};

// The group of one rank: every collective is a copy or nothing; point-to-point is an error.
std::unique_ptr<Comm> MakeLocalComm(Backend& backend);

}  // namespace ptdp
