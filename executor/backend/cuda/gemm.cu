// Matrix products. executor/backend/backend.h's operands are row-major; cuBLAS's are column-major,
// where a row-major (r, c) buffer with leading dimension ld reads as its (c, r) transpose. So C (m,
// n) = op(A) op(B) is computed as the column-major C^T (n, m) = op(B)^T op(A)^T: the operands swap
// places, op(B) keeps B's transpose flag, and cuBLAS's (m, n) is our (n, m). fp32 goes through
// cuBLASLt with CUBLAS_COMPUTE_32F (no TF32, so results match the CPU to fp32 rounding), falling
// back to cublasSgemm when Lt offers no algorithm; fp64 through cublasDgemm. 16-bit a and b (bf16
// or fp16) with c of their type or fp32: cuBLASLt with CUBLAS_COMPUTE_32F and fp32 alpha and beta,
// falling back to cublasGemmEx with the same types; split-K partial sums stay in fp32 (no
// reductions in a 16-bit output type), so c is rounded once, as the CPU's fp32 product on the
// widened operands is.
#include <climits>
#include <cstdint>

#include "executor/backend/cuda/backend.cuh"
#include "executor/backend/cuda/common.cuh"

namespace ptdp::cuda {
namespace {

// The largest power of two, up to 256, that divides the address (cuBLASLt's alignment figure).
int Alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && v % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

int ToInt(int64_t v) {
  PTDP_CHECK(v >= 0 && v <= INT_MAX);
  return static_cast<int>(v);
}

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// cuBLAS's type for fp32, bf16 and fp16 spans (the Lt and Ex paths).
cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF64:
      return CUDA_R_64F;
    case DType::kI32:
      break;
  }
  throw InternalError("cuda backend: Gemm on int32");
}

template <typename V>
void SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  PTDP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename V>
void SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
             const V& value) {
  PTDP_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// Leading dimensions cuBLAS accepts (at least the stored row length, and 1).
void CheckLeadingDimensions(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                            int64_t ldb, int64_t ldc) {
  PTDP_CHECK(lda >= std::max<int64_t>(1, ta ? m : k));
  PTDP_CHECK(ldb >= std::max<int64_t>(1, tb ? k : n));
  PTDP_CHECK(ldc >= std::max<int64_t>(1, n));
}

}  // namespace

void CudaBackend::Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, Span a,
                       int64_t lda, Span b, int64_t ldb, double beta, Span c, int64_t ldc) {
  PTDP_CHECK(m >= 0 && n >= 0 && k >= 0);
  const bool sixteen = Is16Bit(a.dtype);
  if (a.dtype == DType::kI32 || b.dtype != a.dtype ||
      !(c.dtype == a.dtype || (sixteen && c.dtype == DType::kF32))) {
    throw InternalError("cuda backend: Gemm: a " + std::string(Name(a.dtype)) + ", b " +
                        std::string(Name(b.dtype)) + ", c " + std::string(Name(c.dtype)) +
                        ": a and b share a floating dtype; c is theirs, or fp32 when they are "
                        "16-bit (backend.h)");
  }
  if (m == 0 || n == 0) return;
  // Every operand must reach its last element: ld * (rows - 1) + cols (as the CPU checks).
  PTDP_CHECK(a.numel >= lda * ((ta ? k : m) - 1) + (ta ? m : k));
  PTDP_CHECK(b.numel >= ldb * ((tb ? n : k) - 1) + (tb ? k : n));
  PTDP_CHECK(c.numel >= ldc * (m - 1) + n);
  CheckLeadingDimensions(ta, tb, m, n, k, lda, ldb, ldc);
  if ((a.dtype == DType::kF32 || sixteen) && k > 0 &&
      LtGemm(ta, tb, m, n, k, static_cast<float>(alpha), a.data, lda, b.data, ldb,
             static_cast<float>(beta), c.data, ldc, a.dtype, c.dtype)) {
    return;
  }
  if (sixteen) {  // cublasGemmEx: the same types, fp32 compute; cuBLAS's view (header comment)
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    PTDP_CUDA_CHECK(cublasGemmEx(blas_, Op(tb), Op(ta), ToInt(n), ToInt(m), ToInt(k), &al, b.data,
                                 CudaType(b.dtype), ToInt(ldb), a.data, CudaType(a.dtype),
                                 ToInt(lda), &be, c.data, CudaType(c.dtype), ToInt(ldc),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  GemmBatched(c.dtype, ta, tb, m, n, k, alpha, a.data, lda, 0, b.data, ldb, 0, beta, c.data, ldc, 0,
              1);
}

void CudaBackend::GemmBatched(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              double alpha, const void* a, int64_t lda, int64_t stride_a,
                              const void* b, int64_t ldb, int64_t stride_b, double beta, void* c,
                              int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  CheckLeadingDimensions(ta, tb, m, n, k, lda, ldb, ldc);
  const int cm = ToInt(n), cn = ToInt(m), ck = ToInt(k);  // cuBLAS's view (header comment)
  const int c_lda = ToInt(ldb), c_ldb = ToInt(lda), c_ldc = ToInt(ldc);
  const cublasOperation_t op_a = Op(tb), op_b = Op(ta);
  if (dtype == DType::kF32) {
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    const auto* pa = static_cast<const float*>(b);
    const auto* pb = static_cast<const float*>(a);
    auto* pc = static_cast<float*>(c);
    if (batch == 1) {
      PTDP_CUDA_CHECK(
          cublasSgemm(blas_, op_a, op_b, cm, cn, ck, &al, pa, c_lda, pb, c_ldb, &be, pc, c_ldc));
    } else {
      PTDP_CUDA_CHECK(cublasSgemmStridedBatched(blas_, op_a, op_b, cm, cn, ck, &al, pa, c_lda,
                                                stride_b, pb, c_ldb, stride_a, &be, pc, c_ldc,
                                                stride_c, ToInt(batch)));
    }
  } else if (dtype == DType::kF64) {
    const double al = alpha, be = beta;
    const auto* pa = static_cast<const double*>(b);
    const auto* pb = static_cast<const double*>(a);
    auto* pc = static_cast<double*>(c);
    if (batch == 1) {
      PTDP_CUDA_CHECK(
          cublasDgemm(blas_, op_a, op_b, cm, cn, ck, &al, pa, c_lda, pb, c_ldb, &be, pc, c_ldc));
    } else {
      PTDP_CUDA_CHECK(cublasDgemmStridedBatched(blas_, op_a, op_b, cm, cn, ck, &al, pa, c_lda,
                                                stride_b, pb, c_ldb, stride_a, &be, pc, c_ldc,
                                                stride_c, ToInt(batch)));
    }
  } else {
    throw InternalError("cuda backend: Gemm on " + std::string(Name(dtype)));
  }
}

bool CudaBackend::LtGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                         void* c, int64_t ldc, DType ab_dtype, DType c_dtype) {
  if (lt_workspace_ == nullptr) {
    PTDP_CUDA_CHECK(cudaMalloc(&lt_workspace_, static_cast<size_t>(kLtWorkspaceBytes)));
    allocator_.AddExternal(kLtWorkspaceBytes);
  }
  LtPlan& plan = LtPlanFor({ta, tb, m, n, k, lda, ldb, ldc, Alignment(a), Alignment(b),
                            Alignment(c), static_cast<int>(ab_dtype), static_cast<int>(c_dtype)});
  if (!plan.usable) return false;
  // cuBLAS's A is our b and its B our a (header comment); C and D are the same buffer.
  const cublasStatus_t status =
      cublasLtMatmul(lt_, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c, c, plan.c,
                     &plan.algo, lt_workspace_, static_cast<size_t>(kLtWorkspaceBytes), stream_);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused before it ran: the fallback instead
    plan.usable = false;
    return false;
  }
  Check(status, "cublasLtMatmul", __FILE__, __LINE__);
  return true;
}

LtPlan& CudaBackend::LtPlanFor(const LtKey& key) {
  auto found = lt_plans_.find(key);
  if (found != lt_plans_.end()) return found->second;
  if (lt_plans_.size() >= 1024) ClearLtPlans();  // a bound, not a policy: shapes repeat per step
  // In the map before anything can throw, so that what was created is destroyed with it (an
  // entry left half-made stays unusable and its products go to cublasSgemm).
  LtPlan& plan = lt_plans_[key];
  const auto [ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, ab_code, c_code] = key;
  const cudaDataType_t ab_type = CudaType(static_cast<DType>(ab_code));
  const cudaDataType_t c_type = CudaType(static_cast<DType>(c_code));
  const cublasOperation_t op_a = Op(tb), op_b = Op(ta);
  PTDP_CUDA_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  // Layouts describe the stored (untransposed) column-major matrices.
  const bool na = op_a == CUBLAS_OP_N, nb = op_b == CUBLAS_OP_N;
  PTDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab_type, static_cast<uint64_t>(na ? n : k),
                                             static_cast<uint64_t>(na ? k : n), ldb));
  PTDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab_type, static_cast<uint64_t>(nb ? k : m),
                                             static_cast<uint64_t>(nb ? m : k), lda));
  PTDP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.c, c_type, static_cast<uint64_t>(n),
                                             static_cast<uint64_t>(m), ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  PTDP_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int found_algos = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  try {
    SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            static_cast<uint64_t>(kLtWorkspaceBytes));
    // Sub-matrices start anywhere: tell the heuristic the real alignments (cuBLAS's A is our b).
    SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(align_b));
    SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(align_a));
    SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(align_c));
    SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(align_c));
    if (c_type != CUDA_R_32F) {  // 16-bit c: split-K partial sums in fp32, never in 16 bits
      SetPref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
              static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK &
                                    ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
    }
    status = cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1,
                                            &result, &found_algos);
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED (no algorithm for this shape and alignment) is an answer, not an error.
  if (status == CUBLAS_STATUS_SUCCESS && found_algos > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
      result.workspaceSize <= static_cast<uint64_t>(kLtWorkspaceBytes)) {
    plan.algo = result.algo;
    plan.usable = true;
  }
  return plan;
}

void CudaBackend::ClearLtPlans() {
  for (auto& [key, plan] : lt_plans_) {
    if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c != nullptr) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  }
  lt_plans_.clear();
}

}  // namespace ptdp::cuda
