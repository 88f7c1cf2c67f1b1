// Kernel time by operation class, for `ptdp validate`'s per-class rows: how long the backend's
// kernels of each class ran, to set beside the simulator's kernel times of the same classes
// (simulator/kernel_classes.h).
//
// The classes follow the simulator's kinds of work (simulator/layer_work.h WorkKind): matrix
// products (Gemm), the core attention (Attention*), every other kernel of the forward and
// backward (memory-bound: norms, activations, embeddings, rotary, the cross entropy, the router
// and the token shuffles of MoE, copies, conversions, reductions), and the optimizer step
// (everything the optimizer runs: gradient norm, clipping, Adam or SGD).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ptdp {

enum class KernelClass : uint8_t { kGemm, kAttention, kMemory, kOptimizer };
inline constexpr int kNumKernelClasses = 4;
// "gemm", "attention", "memory-bound", "optimizer"
std::string_view Name(KernelClass kernel_class);

using KernelSeconds = std::array<double, kNumKernelClasses>;

// Times the kernels of one backend. Begin() just before a kernel is issued, End(c) just after:
// the kernel's time is added to class c. Totals() waits for the kernels timed so far and
// returns each class's seconds since the clock was made. Kernels must not overlap (one stream).
// The host clock (Backend's default) times synchronous kernels by the wall clock; a GPU
// backend's records events on its stream, so the figures are device time, without the gaps in
// which the device waits for the host.
class KernelClock {
 public:
  virtual ~KernelClock() = default;
  virtual void Begin() = 0;
  virtual void End(KernelClass kernel_class) = 0;
  virtual KernelSeconds Totals() = 0;
};

}  // namespace ptdp
