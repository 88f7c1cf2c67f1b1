// A key-value store over TCP for bootstrapping a job that has no MPI (torchrun-style launches:
// Slurm scripts, Kubernetes): rank 0 serves it on MASTER_PORT (every interface), every rank
// (rank 0 too) is a client of it at MASTER_ADDR:MASTER_PORT. It carries a few small values, the
// NCCL unique id above all (PyTorch's TCPStore does the same job for torch.distributed).
//
// Protocol (one connection per rank, one request at a time, answered at once):
//   request  [u8 op][u32 key bytes][key][u32 value bytes][value]   op: 'S' set, 'C' check, 'A' add
//   answer   [u8 'y' found | 'n' missing][u32 value bytes][value]
// integers little-endian. Get polls 'C' until the key is there, so a wait that times out leaves
// the connection usable (and the barrier's message can say how many ranks came).
//
// Every failure throws StoreError naming host:port, the rank, and what failed or timed out.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace ptdp {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // MASTER_ADDR: where the clients connect
  int port = 0;                    // MASTER_PORT; 0 on rank 0: an ephemeral port (tests)
  int rank = 0;
  int world_size = 1;
  // How long a rank tries to reach rank 0's store, and how long Get and Barrier wait.
  double timeout_s = 300;
};

class TcpStore {
 public:
  // Rank 0 starts serving first (a busy port throws), then every rank connects, retrying until
  // timeout_s (rank 0 may start after the others).
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore();  // rank 0: stops serving (let every rank pass a last Barrier first)
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return options_.port; }  // the port served (the ephemeral one on rank 0)
  const TcpStoreOptions& options() const { return options_; }

  void Set(const std::string& key, const std::string& value);  // any bytes
  // Waits until some rank has set `key` (at most timeout_s) and returns its value.
  std::string Get(const std::string& key);
  // Adds `delta` to the integer at `key` (0 when unset) and returns the sum.
  int64_t Add(const std::string& key, int64_t delta);
  // Returns when every rank of the world has called Barrier(name) (each name once per rank).
  void Barrier(const std::string& name);

 private:
  class Server;
  // One request and its answer; returns whether the key was found.
  bool Request(char op, const std::string& key, const std::string& value, std::string* answer);
  [[noreturn]] void Fail(const std::string& what) const;

  TcpStoreOptions options_;
  std::unique_ptr<Server> server_;  // rank 0 only
  int fd_ = -1;
};

}  // namespace ptdp
