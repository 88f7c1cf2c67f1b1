#include "executor/comm/mpi.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <numeric>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "executor/backend/cuda.h"
#include "executor/launch/env.h"

namespace ptdp {
namespace {

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;  // moved as bits; reductions go through fp32 (MpiComm)
  }
  return MPI_BYTE;
}

MPI_Op MpiOp(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

int Count(int64_t numel) {
  PTDP_CHECK(numel >= 0 && numel <= INT32_MAX);
  return static_cast<int>(numel);
}

// Host memory for a span of backend memory, for MPI: the span itself on the CPU backend; on a
// device backend (CUDA) a host copy, downloaded on construction when `download`, and uploaded
// back by Store().
class HostSpan {
 public:
  HostSpan(Backend& backend, Span span, bool device, bool download)
      : backend_(backend), span_(span), device_(device) {
    if (!device_ || span.numel == 0) return;
    copy_.resize(static_cast<size_t>(span.bytes()));
    if (download) backend_.Download(span_, copy_.data());
  }
  void* data() { return device_ ? copy_.data() : span_.data; }
  void Store() {
    if (device_ && span_.numel > 0) backend_.Upload(span_, copy_.data());
  }
  std::vector<char> Release() { return std::move(copy_); }

 private:
  Backend& backend_;
  Span span_;
  bool device_;
  std::vector<char> copy_;
};

class MpiRequest final : public CommRequest {
 public:
  // `staged`: the host copy a device span was sent from; kept until the send completes.
  explicit MpiRequest(MPI_Request request, std::vector<char> staged = {})
      : request_(request), staged_(std::move(staged)) {}
  ~MpiRequest() override {
    // A request dropped before completion would leave MPI reading freed memory, so wait; but
    // not while an error unwinds the stack: the peer may never receive, and the job is about
    // to be aborted.
    if (request_ != MPI_REQUEST_NULL && std::uncaught_exceptions() == 0) {
      MPI_Wait(&request_, MPI_STATUS_IGNORE);
    }
  }
  bool Test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    PTDP_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  void Wait() override {
    if (request_ != MPI_REQUEST_NULL) PTDP_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }

 private:
  MPI_Request request_;
  std::vector<char> staged_;
};

class MpiComm final : public Comm {
 public:
  // Takes ownership of `comm` unless it is MPI_COMM_WORLD.
  MpiComm(MPI_Comm comm, Backend& backend)
      : comm_(comm), backend_(backend), device_(CudaComputeStream(backend) != nullptr) {
    PTDP_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    PTDP_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    PTDP_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    void* value = nullptr;
    int flag = 0;
    PTDP_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag));
    max_tag_ = flag ? *static_cast<int*>(value) : 32767;
  }
  ~MpiComm() override {
    // Not while an error unwinds the stack (the job is about to be aborted).
    if (comm_ != MPI_COMM_WORLD && std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // MPI has no bf16 type (and fp16 only as an extension): a reduction over 16-bit data converts
  // it to fp32, reduces that, and rounds the result once, which is as accurate as a 16-bit
  // reduction can be (NCCL's bf16 sums round at each step of its ring). Megatron reduces the
  // gradients in fp32 main_grad, so only activations take this path: a row-parallel linear's
  // partial outputs (the tensor-parallel all-reduce, or reduce-scatter under sequence
  // parallelism), the expert tensor-parallel reduce-scatter.
  void AllReduce(Span data, ReduceOp op) override {
    if (size_ == 1 || data.numel == 0) return;
    if (Is16Bit(data.dtype)) {
      Tensor wide = Widen(data);
      AllReduce(wide.span(), op);
      return backend_.Convert(data, wide.span());
    }
    HostSpan host(backend_, data, device_, true);
    PTDP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host.data(), Count(data.numel), MpiType(data.dtype),
                                 MpiOp(op), comm_));
    host.Store();
  }
  void AllGather(Span in, Span out) override {
    PTDP_CHECK(out.numel == in.numel * size_ && in.dtype == out.dtype);
    if (size_ == 1) return backend_.Copy(out, in);
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Allgather(host_in.data(), Count(in.numel), MpiType(in.dtype),
                                 host_out.data(), Count(in.numel), MpiType(out.dtype), comm_));
    host_out.Store();
  }
  void ReduceScatter(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel * size_ && in.dtype == out.dtype);
    if (size_ == 1) return backend_.Copy(out, in);
    if (Is16Bit(in.dtype)) {
      Tensor wide_in = Widen(in), wide_out = Widen(out);
      ReduceScatter(wide_in.span(), wide_out.span());
      return backend_.Convert(out, wide_out.span());
    }
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Reduce_scatter_block(host_in.data(), host_out.data(), Count(out.numel),
                                            MpiType(in.dtype), MPI_SUM, comm_));
    host_out.Store();
  }
  void AllToAll(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel && in.numel % size_ == 0 && in.dtype == out.dtype);
    if (size_ == 1) return backend_.Copy(out, in);
    const int block = Count(in.numel / size_);
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Alltoall(host_in.data(), block, MpiType(in.dtype), host_out.data(), block,
                                MpiType(out.dtype), comm_));
    host_out.Store();
  }
  void AllToAllV(Span in, const std::vector<int64_t>& send_counts, Span out,
                 const std::vector<int64_t>& recv_counts) override {
    PTDP_CHECK(in.dtype == out.dtype);
    const std::vector<int> send = Counts(send_counts, in.numel);
    const std::vector<int> recv = Counts(recv_counts, out.numel);
    const std::vector<int> send_at = Offsets(send), recv_at = Offsets(recv);
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Alltoallv(host_in.data(), send.data(), send_at.data(), MpiType(in.dtype),
                                 host_out.data(), recv.data(), recv_at.data(), MpiType(out.dtype),
                                 comm_));
    host_out.Store();
  }
  void AllGatherV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(in.dtype == out.dtype && counts.at(static_cast<size_t>(rank_)) == in.numel);
    const std::vector<int> sizes = Counts(counts, out.numel);
    const std::vector<int> at = Offsets(sizes);
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Allgatherv(host_in.data(), Count(in.numel), MpiType(in.dtype),
                                  host_out.data(), sizes.data(), at.data(), MpiType(out.dtype),
                                  comm_));
    host_out.Store();
  }
  void ReduceScatterV(Span in, Span out, const std::vector<int64_t>& counts) override {
    PTDP_CHECK(in.dtype == out.dtype && counts.at(static_cast<size_t>(rank_)) == out.numel);
    if (Is16Bit(in.dtype)) {
      Tensor wide_in = Widen(in), wide_out = Widen(out);
      ReduceScatterV(wide_in.span(), wide_out.span(), counts);
      return backend_.Convert(out, wide_out.span());
    }
    const std::vector<int> sizes = Counts(counts, in.numel);
    HostSpan host_in(backend_, in, device_, true), host_out(backend_, out, device_, false);
    PTDP_MPI_CHECK(MPI_Reduce_scatter(host_in.data(), host_out.data(), sizes.data(),
                                      MpiType(in.dtype), MPI_SUM, comm_));
    host_out.Store();
  }
  void Broadcast(Span data, int root) override {
    if (size_ == 1) return;
    HostSpan host(backend_, data, device_, rank_ == root);
    PTDP_MPI_CHECK(MPI_Bcast(host.data(), Count(data.numel), MpiType(data.dtype), root, comm_));
    host.Store();
  }
  void Barrier() override { PTDP_MPI_CHECK(MPI_Barrier(comm_)); }

  // MPI-3's non-blocking collectives on host memory of 32 or 64-bit elements (the fp32 gradients
  // and, as bits, 16-bit weights for a gather); device memory, and 16-bit data to reduce, take the
  // blocking path (staged copies and widening cannot outlive the call).
  std::unique_ptr<CommRequest> StartAllReduce(Span data) override {
    if (size_ == 1 || data.numel == 0 || device_ || Is16Bit(data.dtype)) {
      return Comm::StartAllReduce(data);
    }
    MPI_Request request = MPI_REQUEST_NULL;
    PTDP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data, Count(data.numel), MpiType(data.dtype),
                                  MPI_SUM, comm_, &request));
    return std::make_unique<MpiRequest>(request);
  }
  std::unique_ptr<CommRequest> StartReduceScatter(Span in, Span out) override {
    PTDP_CHECK(in.numel == out.numel * size_ && in.dtype == out.dtype);
    if (size_ == 1 || device_ || Is16Bit(in.dtype)) return Comm::StartReduceScatter(in, out);
    MPI_Request request = MPI_REQUEST_NULL;
    PTDP_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, Count(out.numel), MpiType(in.dtype),
                                             MPI_SUM, comm_, &request));
    return std::make_unique<MpiRequest>(request);
  }
  std::unique_ptr<CommRequest> StartAllGather(Span in, Span out) override {
    PTDP_CHECK(out.numel == in.numel * size_ && in.dtype == out.dtype);
    if (size_ == 1 || device_) return Comm::StartAllGather(in, out);
    MPI_Request request = MPI_REQUEST_NULL;
    PTDP_MPI_CHECK(MPI_Iallgather(in.data, Count(in.numel), MpiType(in.dtype), out.data,
                                  Count(in.numel), MpiType(out.dtype), comm_, &request));
    return std::make_unique<MpiRequest>(request);
  }

  std::unique_ptr<CommRequest> Isend(Span data, int peer, int tag) override {
    PTDP_CHECK(tag >= 0 && tag <= max_tag_);
    MPI_Request request = MPI_REQUEST_NULL;
    HostSpan host(backend_, data, device_, true);
    PTDP_MPI_CHECK(
        MPI_Isend(host.data(), Count(data.numel), MpiType(data.dtype), peer, tag, comm_, &request));
    return std::make_unique<MpiRequest>(request, host.Release());
  }
  void Recv(Span data, int peer, int tag) override {
    PTDP_CHECK(tag >= 0 && tag <= max_tag_);
    MPI_Status status;
    HostSpan host(backend_, data, device_, false);
    PTDP_MPI_CHECK(
        MPI_Recv(host.data(), Count(data.numel), MpiType(data.dtype), peer, tag, comm_, &status));
    int got = 0;
    PTDP_MPI_CHECK(MPI_Get_count(&status, MpiType(data.dtype), &got));
    if (got != data.numel) {
      throw MpiError(fmt::format("received {} elements from rank {} (tag {}), expected {}", got,
                                 peer, tag, data.numel));
    }
    host.Store();
  }
  int max_tag() const override { return max_tag_; }

  std::unique_ptr<Comm> Split(int color, int key) override {
    MPI_Comm out = MPI_COMM_NULL;
    PTDP_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(out, backend_);
  }

  std::vector<std::string> GatherStrings(const std::string& mine, int root) override {
    const int length = Count(static_cast<int64_t>(mine.size()));
    std::vector<int> lengths(rank_ == root ? size_ : 0);
    PTDP_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_));
    std::vector<int> offsets(lengths.size());
    std::string all;
    if (rank_ == root) {
      std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
      all.resize(static_cast<size_t>(std::accumulate(lengths.begin(), lengths.end(), int64_t{0})));
    }
    PTDP_MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                               offsets.data(), MPI_CHAR, root, comm_));
    std::vector<std::string> out;
    for (size_t i = 0; i < lengths.size(); ++i) out.push_back(all.substr(offsets[i], lengths[i]));
    return out;
  }
  double AllReduceHost(double value, ReduceOp op) override {
    double out = value;
    PTDP_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MpiOp(op), comm_));
    return out;
  }

 private:
  // One count per rank of the group, as MPI's ints, adding up to `total` elements.
  std::vector<int> Counts(const std::vector<int64_t>& counts, int64_t total) const {
    PTDP_CHECK(counts.size() == static_cast<size_t>(size_));
    std::vector<int> out;
    for (const int64_t c : counts) out.push_back(Count(c));
    PTDP_CHECK(std::accumulate(counts.begin(), counts.end(), int64_t{0}) == total);
    return out;
  }
  // An fp32 copy of 16-bit data, for a reduction.
  Tensor Widen(Span data) {
    Tensor wide(backend_, DType::kF32, {data.numel}, MemCategory::kCommBuffers);
    if (data.numel > 0) backend_.Convert(wide.span(), data);
    return wide;
  }
  static std::vector<int> Offsets(const std::vector<int>& counts) {
    std::vector<int> out(counts.size());
    std::exclusive_scan(counts.begin(), counts.end(), out.begin(), 0);
    return out;
  }

  MPI_Comm comm_;
  Backend& backend_;
  const bool device_;  // backend memory is device memory: every exchange is staged (HostSpan)
  int rank_ = 0;
  int size_ = 1;
  int max_tag_ = 32767;
};

}  // namespace

void ThrowMpiError(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  int initialized = 0, rank = -1;
  MPI_Initialized(&initialized);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  if (initialized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Get_processor_name(host, &host_length);
  }
  throw MpiError(fmt::format("{} failed at {}:{} on host {}, rank {}: {}", call, file, line,
                             std::string(host, host_length), rank, std::string(text, length)));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  // A process no launcher started is a job of one rank: it needs no MPI (so it runs where
  // MPI's runtime is absent, e.g. a GPU machine with only the executor's libraries); a
  // launched one, even of one rank, joins its job. PTDP_MPI=1 initialises MPI regardless.
  const char* force = std::getenv("PTDP_MPI");
  if (LauncherRank() < 0 && (force == nullptr || std::string_view(force) != "1")) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) host_ = host;
    return;
  }
  PTDP_MPI_CHECK(MPI_Init(argc, argv));
  initialized_ = true;
  PTDP_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  PTDP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PTDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  PTDP_MPI_CHECK(MPI_Get_processor_name(host, &length));
  host_.assign(host, static_cast<size_t>(length));
}

MpiSession::~MpiSession() {
  if (initialized_) MPI_Finalize();
}

std::unique_ptr<Comm> MpiSession::World(Backend& backend) const {
  if (!initialized_) return MakeLocalComm(backend);
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, backend);
}

void MpiAbortJob(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int LauncherRank() {
  // A torchrun-style launch has no MPI even inside an srun task (torchrun started several
  // processes in it): executor/launch/env.h's order decides.
  try {
    const LaunchEnv env = ReadLaunchEnv(ProcessEnv());
    if (env.launcher != Launcher::kNone) return env.mpi() ? env.rank : -1;
  } catch (const InputError&) {
    // A malformed variable is reported where the rank reads its environment; here, the first
    // rank variable set decides, as before.
  }
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      return std::atoi(value);
    }
  }
  return -1;
}

}  // namespace ptdp
