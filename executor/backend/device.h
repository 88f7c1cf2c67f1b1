// What accelerator this process can use. The executor's CUDA backend, `ptdp calibrate` and every
// GPU test ask here first; a GPU test skips, naming `reason`, when `usable` is false.
#pragma once

#include <string>

namespace ptdp {

struct CudaStatus {
  bool built = false;   // ptdp was compiled with CUDA (nvcc, cuBLAS and NCCL found)
  bool usable = false;  // built, and at least one device answers
  // Built, and this machine has no GPU for it: no NVIDIA driver, or a driver that sees none.
  bool no_device = false;
  int device_count = 0;
  std::string device_name;   // of device 0, when usable
  int64_t memory_bytes = 0;  // of device 0, when usable
  std::string nccl_version;  // of the linked NCCL, when built ("2.28.3")
  std::string reason;        // why not usable: "built without CUDA", "no CUDA device: ..."
};

// Queries the CUDA runtime once per call; never throws, never aborts without a driver.
CudaStatus QueryCuda();

// Copies `bytes` bytes host -> device -> host on device 0 and returns whether they came back
// unchanged; false (with `error` set) on any CUDA error. Requires QueryCuda().usable.
bool CudaRoundTrip(size_t bytes, std::string* error);

}  // namespace ptdp
