// NCCL communicators behind Comm, over the CUDA backend's device memory. One process per GPU
// (NCCL refuses two ranks of one communicator on one device; executor/launch/env.h's GpuOfRank).
//
//  - Bootstrap: rank 0's ncclGetUniqueId reaches the others through an IdExchange
//    (nccl_logic.h): an MPI broadcast when mpirun or srun started the job, the TCP store
//    (executor/launch/tcp_store.h) for torchrun-style launches.
//  - Split: ncclCommSplit with the caller's color and key, which form groups as MPI_Comm_split
//    does, so topology.h's MakeProcessGroups gives Megatron's groups in its rank order.
//  - Streams: every NCCL call of the process runs on one communication stream. Before an
//    operation the communication stream waits (an event) for the compute stream's work so far;
//    after a collective or a receive the compute stream waits for it, so results are ready for
//    the next kernel without the host waiting. Host-side results (AllReduceHost,
//    GatherStrings, Barrier) wait on the host.
//  - Point-to-point: each ordered pair of ring neighbours (r -> r+1, r -> r-1 modulo the size:
//    the pipeline's and context parallelism's peers) has a two-rank communicator and stream
//    of its own, split off when the communicator is made (up to 4 per rank, in 2 to 6
//    ncclCommSplit rounds, for every communicator of 2 ranks or more); Isend and Recv issue at
//    once on the pair's stream, so a send waits only for its own receive and the exchange
//    behaves as MPI's rendezvous sends (nccl_logic.h: why one stream, grouped or not,
//    deadlocks the executor's schedules). NCCL has no tags: messages between two ranks meet in
//    order, which the executor's schedules keep (tests/executor/comm/nccl_logic_test.cc); tags
//    only name the messages in errors. Other peers are an InternalError. A send request's
//    Wait orders the compute stream after the send (its buffer is device memory, reused only
//    by later kernels); Test is true once the send has completed. The all-to-alls are grouped
//    ncclSend/ncclRecv on the group's communicator (every rank's group matches the others').
//    The pair streams run concurrently with the collectives' stream: NCCL kernels of several
//    communicators at once, as PyTorch's per-pair communicators run them.
//  - 16-bit sums are NCCL's (rounded at each step of its ring, as Megatron's bf16 all-reduces
//    are), unlike MpiComm's fp32 sums rounded once.
//  - Errors: PTDP_NCCL_CHECK throws NcclError naming the call, file:line, host and world rank,
//    with NCCL's error string and last error. A watchdog thread (PyTorch's NCCL watchdog) checks
//    every issued operation: when one has not completed within NcclOptions::timeout_s, or NCCL
//    reports an asynchronous error (a peer died), it aborts every communicator of the process
//    (ncclCommAbort, which ends the kernels waiting on the dead peer), calls on_timeout with a
//    message naming the operation, the group and the rank, and every later call on any of the
//    communicators throws NcclError with that message.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "executor/comm/comm.h"
#include "executor/comm/nccl_logic.h"

namespace ptdp {

class NcclError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NcclOptions {
  double timeout_s = 600;  // the watchdog's limit for any one operation (init and splits too)
  // Called once, from the watchdog thread, after the communicators are aborted; the CLI prints
  // the message and ends the job (a library never exits). May be empty.
  std::function<void(const std::string& message)> on_timeout;
};

// The world communicator of rank `rank` of `size` over `backend` (a CUDA backend on this rank's
// GPU; executor/launch/env.h says which). Collective over the world: every rank calls it with the
// same size and an exchange that reaches the others. nullptr with *error set when ptdp was built
// without CUDA or `backend` is not a CUDA backend; NcclError when NCCL fails.
std::unique_ptr<Comm> MakeNcclWorld(Backend& backend, int rank, int size,
                                    const IdExchange& exchange, const NcclOptions& options,
                                    std::string* error);

// The size of NCCL's unique id (NCCL_UNIQUE_ID_BYTES, 128), for the exchanges.
inline constexpr size_t kNcclIdBytes = 128;

}  // namespace ptdp
