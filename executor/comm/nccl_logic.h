// The parts of the NCCL communicator (nccl.h) that need neither CUDA nor NCCL, so that
// they are built and tested everywhere.
//
// Point-to-point messages. NCCL's ncclSend holds its stream until the peer's matching ncclRecv
// runs, and NCCL matches the messages between two ranks in order (it has no tags). On one
// communicator and stream, two pipeline stages that each send before they receive (1F1B's
// steady state) deadlock. Megatron avoids that by issuing each stage's sends and receives of a
// step together (batch_isend_irecv, one ncclGroupStart/End) in an order its schedules are
// written for. The executor's pipeline runner posts sends (Isend) and receives (Recv) as MPI
// lets it, and grouping its queued sends with the next receive still deadlocks the interleaved
// schedule: a group completes only when all of it has, so a send in it waits for a peer that
// waits for this rank's next receive (tests/executor/comm/nccl_logic_test.cc shows both deadlocks
// on a model of NCCL's semantics). So each ordered pair of ring neighbours (r -> r+1 and r -> r-1,
// modulo the group's size: the pipeline's and context parallelism's peers) gets a two-rank
// communicator and stream of its own, carrying only the messages from r to that peer, in order: a
// send waits only for its receive, never blocks another message, and the exchange behaves as MPI's
// rendezvous sends do. The model checks that every schedule kind completes so, with the messages
// met in order. The pair communicators are split off when a communicator is made (collective, so
// every rank takes part), in rounds where each rank joins at most one pair (EdgeRounds).
//
// The unique id's exchange: rank 0 makes it, every other rank receives it (over MPI or the TCP
// store), its size checked.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ptdp {

class Comm;
class TcpStore;

// A directed pair of ranks of a group: the messages from `from` to `to`.
struct Edge {
  int from = 0;
  int to = 0;
  bool operator==(const Edge& o) const { return from == o.from && to == o.to; }
};

// The ordered pairs of ring neighbours in a group of n ranks: (r, r+1 mod n) and
// (r, r-1 mod n) for every r, each once; none for n == 1.
std::vector<Edge> NeighbourEdges(int n);

// NeighbourEdges(n) in rounds of splits: within a round no rank is in two pairs. Greedy in the
// order of NeighbourEdges: 2 rounds for n == 2, 4 for even n, at most 6 for odd n.
std::vector<std::vector<Edge>> EdgeRounds(int n);

// ncclCommSplit's arguments for `rank` in one round: color = the index of its pair in the round
// (-1: in none), key 0 for the sender and 1 for the receiver, so that in the pair's
// communicator the sender is rank 0 and the receiver rank 1.
struct SplitArgs {
  int color = -1;
  int key = 0;
};
SplitArgs EdgeSplit(const std::vector<Edge>& round, int rank);

// How the ranks share NCCL's unique id (ncclUniqueId's bytes): called on every rank with rank
// 0's id (an empty string on the others); returns rank 0's id on every rank.
using IdExchange = std::function<std::string(const std::string& root_id)>;

// Over the TCP store (torchrun-style launches): rank 0 sets `key`, the others wait for it
// (TcpStore's timeout). A value of another size than id_bytes throws StoreError naming the key.
// `store` must outlive the exchange.
IdExchange IdOverStore(TcpStore& store, std::string key, size_t id_bytes);

// Over a communicator that moves host memory (MpiComm from MpiSession::World over a CPU
// backend, or LocalComm): a Broadcast from rank 0. `world` must outlive the exchange.
IdExchange IdOverComm(Comm& world, size_t id_bytes);

}  // namespace ptdp
