// NcclComm (nccl.h): built when CUDA and NCCL are found. Host code only (the CUDA runtime
// and NCCL's API, no kernels), so it is C++20 like the rest of the executor.
#include "executor/comm/nccl.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"
#include "executor/backend/cuda.h"

namespace ptdp {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);

// Where an error happened: the host and the world rank, for every message.
struct Who {
  std::string host;
  int rank = -1;
};

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

[[noreturn]] void ThrowAt(const char* call, const char* file, int line, const Who& who,
                          const std::string& what) {
  throw NcclError(fmt::format("{} failed at {}:{} on host {}, rank {}: {}", call, file, line,
                              who.host, who.rank, what));
}

void CheckNccl(ncclResult_t rc, const char* call, const char* file, int line, const Who& who) {
  if (rc == ncclSuccess) return;
  std::string what = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') what += std::string(" (") + last + ")";
  ThrowAt(call, file, line, who, what);
}

void CheckCuda(cudaError_t err, const char* call, const char* file, int line, const Who& who) {
  if (err == cudaSuccess) return;
  ThrowAt(call, file, line, who,
          std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
}

}  // namespace

// "PTDP_NCCL_CHECK(ncclAllReduce(...))" throws NcclError("ncclAllReduce(...) failed at
// executor/comm/nccl.cc:123 on host h, rank 3: <NCCL's error> (<NCCL's last error>)"); a
// `who_` (Who) must be in scope. PTDP_NCCL_CUDA_CHECK is the same for CUDA runtime calls.
#define PTDP_NCCL_CHECK(call) ::ptdp::CheckNccl((call), #call, __FILE__, __LINE__, who_)
#define PTDP_NCCL_CUDA_CHECK(call) ::ptdp::CheckCuda((call), #call, __FILE__, __LINE__, who_)

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
  }
  throw InternalError("NcclType: unknown dtype");
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

size_t Count(int64_t numel) {
  PTDP_CHECK(numel >= 0);
  return static_cast<size_t>(numel);
}

// Checks every operation the process issued on its communication stream; see nccl.h.
class Watchdog {
 public:
  Watchdog(int device, const NcclOptions& options, Who who)
      : device_(device), options_(options), who_(std::move(who)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    for (const Pending& p : pending_) cudaEventDestroy(p.event);
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void AddComm(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    comms_.insert(comm);
  }
  void RemoveComm(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    comms_.erase(comm);
  }
  // An operation issued on the communication stream, `event` recorded after it (the watchdog
  // destroys the event).
  void Watch(cudaEvent_t event, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back({event, std::move(what), Clock::now()});
  }
  // A blocking host call (init, split) that no event can follow.
  void BeginHostCall(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    host_call_ = std::move(what);
    host_call_start_ = Clock::now();
  }
  void EndHostCall() {
    std::lock_guard<std::mutex> lock(mutex_);
    host_call_.clear();
  }
  // The failure message once the watchdog has aborted the communicators; "" until then.
  std::string failure() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

 private:
  struct Pending {
    cudaEvent_t event;
    std::string what;
    Clock::time_point start;
  };

  void Run() {
    cudaSetDevice(device_);  // events are queried on the communicators' device
    // A tenth of the limit, at most 100 ms (an infinite limit: only asynchronous errors).
    const auto tick = std::chrono::milliseconds(
        static_cast<int64_t>(std::clamp(options_.timeout_s * 100, 1.0, 100.0)));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, tick, [this] { return stop_; })) {
      if (!failure_.empty()) continue;
      const std::string message = Check();
      if (message.empty()) continue;
      // Abort while holding the lock (no communicator is added or removed meanwhile), then
      // tell the owner without it.
      for (const ncclComm_t comm : comms_) ncclCommAbort(comm);
      comms_.clear();
      failure_ = message;
      lock.unlock();
      if (options_.on_timeout) options_.on_timeout(message);
      lock.lock();
    }
  }

  // The failure to report now, or "".
  std::string Check() {
    const double elapsed_limit = options_.timeout_s;
    auto seconds = [](Clock::time_point since) {
      return std::chrono::duration<double>(Clock::now() - since).count();
    };
    const std::string who = fmt::format("rank {} (host {})", who_.rank, who_.host);
    if (!host_call_.empty() && seconds(host_call_start_) > elapsed_limit) {
      return fmt::format(
          "{}: {} has not returned in {} s; another rank may be stopped, hung or dead "
          "(NCCL watchdog: communicators aborted)",
          who, host_call_, elapsed_limit);
    }
    for (const ncclComm_t comm : comms_) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        return fmt::format(
            "{}: NCCL reported an asynchronous error: {}{}; a peer may have died "
            "(NCCL watchdog: communicators aborted)",
            who, ncclGetErrorString(async),
            pending_.empty() ? "" : " during " + pending_.front().what);
      }
    }
    // Several streams (the collectives', each point-to-point pair's): every operation is asked.
    for (auto it = pending_.begin(); it != pending_.end();) {
      const cudaError_t state = cudaEventQuery(it->event);
      if (state == cudaSuccess) {
        cudaEventDestroy(it->event);
        it = pending_.erase(it);
        continue;
      }
      if (state != cudaErrorNotReady) {
        return fmt::format("{}: {} failed on the device: {}: {}", who, it->what,
                           cudaGetErrorName(state), cudaGetErrorString(state));
      }
      if (seconds(it->start) > elapsed_limit) {
        return fmt::format(
            "{}: {} has not completed in {} s; another rank may be stopped, hung or dead, or "
            "have issued its operations in another order (NCCL watchdog: communicators aborted)",
            who, it->what, elapsed_limit);
      }
      ++it;
    }
    return "";
  }

  const int device_;
  const NcclOptions options_;
  const Who who_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::list<Pending> pending_;
  std::set<ncclComm_t> comms_;
  std::string host_call_;
  Clock::time_point host_call_start_;
  std::string failure_;
  std::thread thread_;
};

// What the world and its splits share: the backend, the two streams, the watchdog.
struct Shared {
  Shared(Backend& b, int dev, const NcclOptions& options, Who w)
      : backend(b),
        compute(static_cast<cudaStream_t>(CudaComputeStream(b))),
        device(dev),
        who_(std::move(w)) {
    PTDP_NCCL_CUDA_CHECK(cudaSetDevice(device));
    PTDP_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    PTDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready, cudaEventDisableTiming));
    watchdog = std::make_unique<Watchdog>(device, options, who_);
  }
  ~Shared() {
    watchdog.reset();
    if (compute_ready != nullptr) cudaEventDestroy(compute_ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;

  Backend& backend;
  cudaStream_t compute;
  int device;
  Who who_;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_ready = nullptr;
  std::unique_ptr<Watchdog> watchdog;
};

// A send's or an overlapped collective's completion: an event after it on its stream.
struct RequestState {
  cudaEvent_t done = nullptr;
  ~RequestState() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};

class NcclComm;

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclComm& comm, std::shared_ptr<RequestState> state)
      : comm_(comm), state_(std::move(state)) {}
  ~NcclRequest() override;
  bool Test() override;
  void Wait() override;

 private:
  NcclComm& comm_;
  std::shared_ptr<RequestState> state_;
  bool waited_ = false;
};

// The two-rank communicator and stream that carry one ordered pair's messages
// (nccl_logic.h): the sender is rank 0 in it, the receiver rank 1.
struct PairComm {
  int peer = 0;
  bool outgoing = false;  // this rank sends to `peer` on it (else receives from it)
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

class NcclComm final : public Comm {
 public:
  NcclComm(std::shared_ptr<Shared> shared, ncclComm_t comm)
      : shared_(std::move(shared)), who_(shared_->who_), comm_(comm) {
    PTDP_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    PTDP_NCCL_CHECK(ncclCommCount(comm_, &size_));
    shared_->watchdog->AddComm(comm_);
    try {
      MakePairs();
    } catch (...) {
      Release(/*abort=*/true);
      throw;
    }
  }
  ~NcclComm() override { Release(std::uncaught_exceptions() > 0); }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduce(Span data, ReduceOp op) override {
    if (data.numel == 0) return;
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclAllReduce(data.data, data.data, Count(data.numel), NcclType(data.dtype),
                                  NcclOp(op), comm_, shared_->stream));
    End(shared_->stream, Describe("ncclAllReduce", data), true);
  }
  void AllGather(Span in, Span out) override {
    PTDP_CHECK(out.numel == in.numel * size_ && in.dtype == out.dtype);
    if (in.numel == 0) return;
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclAllGather(in.data, out.data, Count(in.numel), NcclType(in.dtype), comm_,
                                  shared_->stream));
    End(shared_->stream, Describe("ncclAllGather", in), true);
  }
  void ReduceScatter(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel * size_ && in.dtype == out.dtype);
    if (out.numel == 0) return;
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclReduceScatter(in.data, out.data, Count(out.numel), NcclType(in.dtype),
                                      ncclSum, comm_, shared_->stream));
    End(shared_->stream, Describe("ncclReduceScatter", in), true);
  }
  // The non-blocking collectives run on this communicator's overlap stream, after what the
  // compute stream has queued so far; the request's Wait() orders the compute stream after them.
  // A communicator's operations run in the order issued whatever their stream (NCCL orders them),
  // while the tensor-parallel group's, another communicator, run beside them.
  std::unique_ptr<CommRequest> StartAllReduce(Span data) override {
    if (data.numel == 0) return std::make_unique<DoneRequest>();
    const cudaStream_t stream = OverlapStream();
    Begin(stream);
    PTDP_NCCL_CHECK(ncclAllReduce(data.data, data.data, Count(data.numel), NcclType(data.dtype),
                                  ncclSum, comm_, stream));
    return Started(stream, Describe("ncclAllReduce (overlapped)", data));
  }
  std::unique_ptr<CommRequest> StartReduceScatter(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel * size_ && in.dtype == out.dtype);
    if (out.numel == 0) return std::make_unique<DoneRequest>();
    const cudaStream_t stream = OverlapStream();
    Begin(stream);
    PTDP_NCCL_CHECK(ncclReduceScatter(in.data, out.data, Count(out.numel), NcclType(in.dtype),
                                      ncclSum, comm_, stream));
    return Started(stream, Describe("ncclReduceScatter (overlapped)", in));
  }
  std::unique_ptr<CommRequest> StartAllGather(Span in, Span out) override {
    PTDP_CHECK(out.numel == in.numel * size_ && in.dtype == out.dtype);
    if (in.numel == 0) return std::make_unique<DoneRequest>();
    const cudaStream_t stream = OverlapStream();
    Begin(stream);
    PTDP_NCCL_CHECK(
        ncclAllGather(in.data, out.data, Count(in.numel), NcclType(in.dtype), comm_, stream));
    return Started(stream, Describe("ncclAllGather (overlapped)", in));
  }
  void AllToAll(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel && in.numel % size_ == 0 && in.dtype == out.dtype);
    const int64_t block = in.numel / size_;
    const std::vector<int64_t> counts(static_cast<size_t>(size_), block);
    Exchange("all-to-all (grouped ncclSend/ncclRecv)", in, counts, out, counts);
  }
  void AllToAllV(Span in, const std::vector<int64_t>& send_counts, Span out,
                 const std::vector<int64_t>& recv_counts) override {
    PTDP_CHECK(in.dtype == out.dtype);
    CheckCounts(send_counts, in.numel);
    CheckCounts(recv_counts, out.numel);
    Exchange("all-to-all-v (grouped ncclSend/ncclRecv)", in, send_counts, out, recv_counts);
  }
  void AllGatherV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(in.dtype == out.dtype && counts.at(static_cast<size_t>(rank_)) == in.numel);
    CheckCounts(counts, out.numel);
    // Every rank sends its block to every other and copies its own, in one group.
    const std::vector<int64_t> at = Offsets(counts);
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<size_t>(peer);
      if (peer == rank_ || counts[p] == 0) continue;
      if (in.numel > 0) {
        PTDP_NCCL_CHECK(
            ncclSend(in.data, Count(in.numel), NcclType(in.dtype), peer, comm_, shared_->stream));
      }
      PTDP_NCCL_CHECK(ncclRecv(out.Slice(at[p], counts[p]).data, Count(counts[p]),
                               NcclType(out.dtype), peer, comm_, shared_->stream));
    }
    PTDP_NCCL_CHECK(ncclGroupEnd());
    if (in.numel > 0) {
      PTDP_NCCL_CUDA_CHECK(cudaMemcpyAsync(out.Slice(at[static_cast<size_t>(rank_)], in.numel).data,
                                           in.data, static_cast<size_t>(in.bytes()),
                                           cudaMemcpyDeviceToDevice, shared_->stream));
    }
    End(shared_->stream, Describe("all-gather-v (grouped ncclSend/ncclRecv)", out), true);
  }
  void ReduceScatterV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(in.dtype == out.dtype && counts.at(static_cast<size_t>(rank_)) == out.numel);
    CheckCounts(counts, in.numel);
    // One ncclReduce per block, rooted at the rank that keeps it, in one group.
    const std::vector<int64_t> at = Offsets(counts);
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclGroupStart());
    for (int root = 0; root < size_; ++root) {
      const auto r = static_cast<size_t>(root);
      if (counts[r] == 0) continue;
      PTDP_NCCL_CHECK(ncclReduce(in.Slice(at[r], counts[r]).data,
                                 root == rank_ ? out.data : nullptr, Count(counts[r]),
                                 NcclType(in.dtype), ncclSum, root, comm_, shared_->stream));
    }
    PTDP_NCCL_CHECK(ncclGroupEnd());
    End(shared_->stream, Describe("reduce-scatter-v (grouped ncclReduce)", in), true);
  }
  void Broadcast(Span data, int root) override {
    PTDP_CHECK(root >= 0 && root < size_);
    if (data.numel == 0) return;
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclBroadcast(data.data, data.data, Count(data.numel), NcclType(data.dtype),
                                  root, comm_, shared_->stream));
    End(shared_->stream, Describe("ncclBroadcast", data), true);
  }
  void Barrier() override {
    Tensor one(shared_->backend, DType::kI32, {1}, MemCategory::kCommBuffers);
    AllReduce(one.span(), ReduceOp::kSum);
    HostWait(shared_->stream);
  }

  // On the pair's own communicator and stream, at once (nccl_logic.h says why).
  std::unique_ptr<CommRequest> Isend(Span data, int peer, int tag) override {
    PTDP_CHECK(tag >= 0);
    const PairComm& pair = Pair(true, peer, "send to", tag);
    Begin(pair.stream);
    PTDP_NCCL_CHECK(
        ncclSend(data.data, Count(data.numel), NcclType(data.dtype), 1, pair.comm, pair.stream));
    auto state = std::make_shared<RequestState>();
    PTDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming));
    PTDP_NCCL_CUDA_CHECK(cudaEventRecord(state->done, pair.stream));
    End(pair.stream, Describe(fmt::format("ncclSend (tag {}) to rank {}", tag, peer), data), false);
    return std::make_unique<NcclRequest>(*this, std::move(state));
  }
  void Recv(Span data, int peer, int tag) override {
    PTDP_CHECK(tag >= 0);
    const PairComm& pair = Pair(false, peer, "receive from", tag);
    Begin(pair.stream);
    PTDP_NCCL_CHECK(
        ncclRecv(data.data, Count(data.numel), NcclType(data.dtype), 0, pair.comm, pair.stream));
    End(pair.stream, Describe(fmt::format("ncclRecv (tag {}) from rank {}", tag, peer), data),
        true);
  }
  int max_tag() const override { return INT_MAX; }

  std::unique_ptr<Comm> Split(int color, int key) override {
    HostWait(shared_->stream);
    ncclComm_t out = SplitOff(comm_, color, key,
                              fmt::format("ncclCommSplit(color {}, key {}) of a group of {} "
                                          "(rank {} of it)",
                                          color, key, size_, rank_));
    if (out == nullptr) return nullptr;
    return std::make_unique<NcclComm>(shared_, out);
  }

  std::vector<std::string> GatherStrings(const std::string& mine, int root) override {
    PTDP_CHECK(root >= 0 && root < size_);
    Backend& b = shared_->backend;
    // The lengths, then every string padded to the longest, as int32 words.
    const auto length = static_cast<int32_t>(mine.size());
    Tensor one(b, DType::kI32, {1}, MemCategory::kCommBuffers);
    Tensor lengths(b, DType::kI32, {size_}, MemCategory::kCommBuffers);
    b.Upload(one.span(), &length);
    AllGather(one.span(), lengths.span());
    std::vector<int32_t> sizes(static_cast<size_t>(size_));
    b.Download(lengths.span(), sizes.data());
    const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
    const int64_t words = std::max<int64_t>(1, (longest + 3) / 4);
    std::vector<int32_t> packed(static_cast<size_t>(words), 0);
    std::memcpy(packed.data(), mine.data(), mine.size());
    Tensor in(b, DType::kI32, {words}, MemCategory::kCommBuffers);
    Tensor all(b, DType::kI32, {words * size_}, MemCategory::kCommBuffers);
    b.Upload(in.span(), packed.data());
    AllGather(in.span(), all.span());
    std::vector<int32_t> every(static_cast<size_t>(words * size_));
    b.Download(all.span(), every.data());
    ThrowIfFailed();
    if (rank_ != root) return {};
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) {
      const char* at = reinterpret_cast<const char*>(every.data() + r * words);
      out.emplace_back(at, static_cast<size_t>(sizes[static_cast<size_t>(r)]));
    }
    return out;
  }
  double AllReduceHost(double value, ReduceOp op) override {
    Tensor t(shared_->backend, DType::kF64, {1}, MemCategory::kCommBuffers);
    shared_->backend.Upload(t.span(), &value);
    AllReduce(t.span(), op);
    double out = 0;
    shared_->backend.Download(t.span(), &out);  // waits for the compute stream, which waited
    ThrowIfFailed();
    return out;
  }

 private:
  friend class NcclRequest;

  void ThrowIfFailed() const {
    if (std::string failure = shared_->watchdog->failure(); !failure.empty()) {
      throw NcclError(failure);
    }
  }

  // ncclCommSplit of `parent`, followed by the watchdog (a blocking call of every rank);
  // nullptr for a negative color.
  ncclComm_t SplitOff(ncclComm_t parent, int color, int key, std::string what) {
    ThrowIfFailed();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t out = nullptr;
    shared_->watchdog->BeginHostCall(std::move(what));
    const ncclResult_t rc =
        ncclCommSplit(parent, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, &config);
    shared_->watchdog->EndHostCall();
    ThrowIfFailed();
    PTDP_NCCL_CHECK(rc);
    return out;
  }

  cudaStream_t OverlapStream() {
    if (overlap_stream_ == nullptr) {
      PTDP_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&overlap_stream_, cudaStreamNonBlocking));
    }
    return overlap_stream_;
  }
  // The request of an operation just queued on `stream`: an event after it (the watchdog
  // follows the operation as it follows the blocking ones).
  std::unique_ptr<CommRequest> Started(cudaStream_t stream, std::string what) {
    auto state = std::make_shared<RequestState>();
    PTDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming));
    PTDP_NCCL_CUDA_CHECK(cudaEventRecord(state->done, stream));
    End(stream, std::move(what), false);
    return std::make_unique<NcclRequest>(*this, std::move(state));
  }

  // The two-rank communicators of this rank's ring neighbours, in EdgeRounds' rounds.
  void MakePairs() {
    if (size_ < 2) return;
    for (const std::vector<Edge>& round : EdgeRounds(size_)) {
      const SplitArgs args = EdgeSplit(round, rank_);
      ncclComm_t comm = SplitOff(comm_, args.color, args.key,
                                 fmt::format("ncclCommSplit of the point-to-point pairs of a "
                                             "group of {} (rank {} of it)",
                                             size_, rank_));
      if (comm == nullptr) continue;
      const Edge& e = round.at(static_cast<size_t>(args.color));
      PairComm pair;
      pair.outgoing = e.from == rank_;
      pair.peer = pair.outgoing ? e.to : e.from;
      pair.comm = comm;
      shared_->watchdog->AddComm(comm);
      pairs_.push_back(pair);  // before the stream: Release frees what is there
      PTDP_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&pairs_.back().stream, cudaStreamNonBlocking));
    }
  }

  const PairComm& Pair(bool outgoing, int peer, std::string_view what, int tag) const {
    ThrowIfFailed();
    for (const PairComm& pair : pairs_) {
      if (pair.outgoing == outgoing && pair.peer == peer) return pair;
    }
    throw InternalError(fmt::format(
        "NcclComm: {} rank {} (tag {}) from rank {} of a group of {}: point-to-point messages "
        "go between ring neighbours only (rank +-1 modulo the group's size)",
        what, peer, tag, rank_, size_));
  }

  // Before an operation on `stream`: it waits for the compute stream's work so far.
  void Begin(cudaStream_t stream) {
    ThrowIfFailed();
    PTDP_NCCL_CUDA_CHECK(cudaEventRecord(shared_->compute_ready, shared_->compute));
    PTDP_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream, shared_->compute_ready, 0));
  }
  // After an operation on `stream`: the watchdog follows it; the compute stream waits for its
  // results when `compute_waits`.
  void End(cudaStream_t stream, std::string what, bool compute_waits) {
    cudaEvent_t event = nullptr;
    PTDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    PTDP_NCCL_CUDA_CHECK(cudaEventRecord(event, stream));
    if (compute_waits) PTDP_NCCL_CUDA_CHECK(cudaStreamWaitEvent(shared_->compute, event, 0));
    shared_->watchdog->Watch(event, std::move(what));
  }
  void HostWait(cudaStream_t stream) {
    ThrowIfFailed();
    const cudaError_t err = cudaStreamSynchronize(stream);
    ThrowIfFailed();  // the watchdog's message says more than the stream's error
    PTDP_NCCL_CUDA_CHECK(err);
  }

  std::string Describe(std::string_view op, Span data) const {
    return fmt::format("{} of {} {} on a group of {} (rank {} of it)", op, data.numel,
                       Name(data.dtype), size_, rank_);
  }

  // Point-to-point exchange of blocks in rank order, as one group (the all-to-alls: every
  // rank's group matches every other's, so the group cannot deadlock).
  void Exchange(std::string_view name, Span in, const std::vector<int64_t>& send_counts, Span out,
                const std::vector<int64_t>& recv_counts) {
    const std::vector<int64_t> send_at = Offsets(send_counts), recv_at = Offsets(recv_counts);
    Begin(shared_->stream);
    PTDP_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<size_t>(peer);
      if (send_counts[p] > 0) {
        PTDP_NCCL_CHECK(ncclSend(in.Slice(send_at[p], send_counts[p]).data, Count(send_counts[p]),
                                 NcclType(in.dtype), peer, comm_, shared_->stream));
      }
      if (recv_counts[p] > 0) {
        PTDP_NCCL_CHECK(ncclRecv(out.Slice(recv_at[p], recv_counts[p]).data, Count(recv_counts[p]),
                                 NcclType(out.dtype), peer, comm_, shared_->stream));
      }
    }
    PTDP_NCCL_CHECK(ncclGroupEnd());
    End(shared_->stream, Describe(name, in), true);
  }

  void CheckCounts(const std::vector<int64_t>& counts, int64_t total) const {
    PTDP_CHECK(counts.size() == static_cast<size_t>(size_));
    PTDP_CHECK(std::accumulate(counts.begin(), counts.end(), int64_t{0}) == total);
    for (const int64_t c : counts) PTDP_CHECK(c >= 0);
  }
  static std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
    std::vector<int64_t> out(counts.size());
    std::exclusive_scan(counts.begin(), counts.end(), out.begin(), int64_t{0});
    return out;
  }

  // Frees the communicators: finalized and destroyed normally; aborted on an error path
  // (`abort`: a peer may never come); nothing when the watchdog has aborted them. Every rank
  // frees its pairs in the reverse of the rounds that made them, then the group's
  // communicator: the same order everywhere, should finalizing wait for the peer.
  void Release(bool abort) {
    std::vector<ncclComm_t> comms;
    for (auto it = pairs_.rbegin(); it != pairs_.rend(); ++it) comms.push_back(it->comm);
    comms.push_back(comm_);
    for (const ncclComm_t c : comms) shared_->watchdog->RemoveComm(c);
    if (shared_->watchdog->failure().empty()) {
      if (!abort) {
        for (const PairComm& pair : pairs_) {
          if (pair.stream != nullptr) cudaStreamSynchronize(pair.stream);
        }
        cudaStreamSynchronize(shared_->stream);
        if (overlap_stream_ != nullptr) cudaStreamSynchronize(overlap_stream_);
      }
      for (const ncclComm_t c : comms) {
        if (c == nullptr) continue;
        if (abort || ncclCommFinalize(c) != ncclSuccess) {
          ncclCommAbort(c);
        } else {
          ncclCommDestroy(c);
        }
      }
    }
    for (const PairComm& pair : pairs_) {
      if (pair.stream != nullptr) cudaStreamDestroy(pair.stream);
    }
    pairs_.clear();
    if (overlap_stream_ != nullptr) cudaStreamDestroy(overlap_stream_);
    overlap_stream_ = nullptr;
  }

  std::shared_ptr<Shared> shared_;
  const Who& who_;
  ncclComm_t comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<PairComm> pairs_;            // in the order made (EdgeRounds'); at most 4
  cudaStream_t overlap_stream_ = nullptr;  // the non-blocking collectives' (made on first use)
};

NcclRequest::~NcclRequest() {
  // A request dropped before Wait: later kernels on the compute stream may reuse its buffer,
  // so they are ordered after the send, as Wait does; not while an error unwinds the stack.
  if (!waited_ && std::uncaught_exceptions() == 0) {
    try {
      Wait();
    } catch (const std::exception&) {
    }
  }
}

bool NcclRequest::Test() {
  comm_.ThrowIfFailed();
  const cudaError_t state = cudaEventQuery(state_->done);
  if (state == cudaErrorNotReady) return false;
  const Who& who_ = comm_.who_;
  PTDP_NCCL_CUDA_CHECK(state);
  waited_ = true;
  return true;
}

void NcclRequest::Wait() {
  comm_.ThrowIfFailed();
  const Who& who_ = comm_.who_;
  PTDP_NCCL_CUDA_CHECK(cudaStreamWaitEvent(comm_.shared_->compute, state_->done, 0));
  waited_ = true;
}

}  // namespace

std::unique_ptr<Comm> MakeNcclWorld(Backend& backend, int rank, int size,
                                    const IdExchange& exchange, const NcclOptions& options,
                                    std::string* error) {
  if (CudaComputeStream(backend) == nullptr) {
    *error = fmt::format("NCCL moves device memory: the {} backend has none (--backend cuda)",
                         backend.name());
    return nullptr;
  }
  PTDP_CHECK(size >= 1 && rank >= 0 && rank < size);
  const Who who_{HostName(), rank};
  auto shared = std::make_shared<Shared>(backend, CudaDeviceOf(backend), options, who_);
  std::string root_id;
  if (rank == 0) {
    ncclUniqueId id;
    PTDP_NCCL_CHECK(ncclGetUniqueId(&id));
    root_id.assign(id.internal, sizeof id.internal);
  }
  const std::string shared_id = exchange(root_id);
  PTDP_CHECK(shared_id.size() == sizeof(ncclUniqueId));
  ncclUniqueId id;
  std::memcpy(id.internal, shared_id.data(), sizeof id.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = nullptr;
  shared->watchdog->BeginHostCall(
      fmt::format("ncclCommInitRankConfig (world rank {} of {})", rank, size));
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  shared->watchdog->EndHostCall();
  if (std::string failure = shared->watchdog->failure(); !failure.empty()) {
    throw NcclError(failure);
  }
  PTDP_NCCL_CHECK(rc);
  return std::make_unique<NcclComm>(std::move(shared), comm);
}

}  // namespace ptdp
