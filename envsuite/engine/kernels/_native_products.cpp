// Matrix products, fp32, out = x @ W.T (+ bias), x (M, K) row-major:
//   rows_linear   W plain (N, K) row-major; each W row is read once for all M rows of x (M small:
//                 a decode step of 1-8 rows is a stream over the weights, as fast as memory allows).
//   panel_linear  W as panels (ceil(N / 16), K, 16): 16 output columns' weights interleaved by k, so one
//                 vector load gives 16 columns' weights at one k. A microkernel keeps up to MR rows x 32
//                 columns of accumulators in registers (MR_DECODE for a decode step's 9-48 rows); every
//                 weight is read once per chunk of rows (once in all for one chunk) and sequentially, so it
//                 serves 1 to thousands of rows on one layout.
// Each output's sum runs over k in order within a vector lane; rows_linear then adds the lanes as a tree.
#include <ATen/Parallel.h>
#include <sys/mman.h>

#include <cstdlib>

#include "_native.h"

namespace envsuite {
namespace {

#if defined(__AVX512F__)
constexpr int MR = 8;  // rows per microkernel: 8 x 2 accumulators + 2 weights of 32 registers
// A decode step's 9-48 rows take chunks of up to 12 (24 accumulators): fewer passes over each k block
// (32 rows: 3 instead of 4; 8-10% faster at 32 rows); more rows keep chunks of 8, which measured 3%
// faster at 256.
constexpr int MR_DECODE = 12;
constexpr int64_t DECODE_ROWS = 48;
#else
constexpr int MR = 4;  // 16 or fewer vector registers
constexpr int MR_DECODE = 4;
constexpr int64_t DECODE_ROWS = 0;
#endif
constexpr int64_t KC = 256;  // k block: a panel pair's 256 x 32 floats (32 KB) stay in L1 across row chunks

void check_product(const at::Tensor& x, const at::Tensor& w, const char* what) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), what, ": CPU tensors only");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, what, ": float32 only");
  TORCH_CHECK(w.is_contiguous(), what, ": the weight must be contiguous");
}

at::Tensor with_bias(at::Tensor out, const std::optional<at::Tensor>& bias) {
  if (bias.has_value() && bias->defined()) out.add_(*bias);
  return out;
}

// ------------------------------------------------------------------------------------------ rows

// out[m, n] for n in [n0, n0 + NR), all m: NR weight rows read once each, kept in L1 for every row chunk.
template <int NR>
void rows_block(const float* x, const float* w, float* out, int64_t M, int64_t K, int64_t N, int64_t n0) {
  constexpr int RM = 4;  // x rows per pass: NR x RM accumulators
  const int64_t kv = K - K % P;
  for (int64_t m0 = 0; m0 < M; m0 += RM) {
    const int rows = (int)std::min<int64_t>(RM, M - m0);
    vec acc[NR][RM] = {};
    for (int64_t k = 0; k < kv; k += P) {
      vec xv[RM];
      for (int r = 0; r < rows; ++r) xv[r] = load(x + (m0 + r) * K + k);
      for (int j = 0; j < NR; ++j) {
        const vec wv = load(w + (n0 + j) * K + k);
        for (int r = 0; r < rows; ++r) acc[j][r] += wv * xv[r];
      }
    }
    for (int j = 0; j < NR; ++j) {
      for (int r = 0; r < rows; ++r) {
        float s = hsum(acc[j][r]);
        for (int64_t k = kv; k < K; ++k) s += w[(n0 + j) * K + k] * x[(m0 + r) * K + k];
        out[(m0 + r) * N + n0 + j] = s;
      }
    }
  }
}

// A float tensor of at least 2 MB on memory the kernel may back with transparent huge pages (2 MB-aligned,
// madvise(MADV_HUGEPAGE): honoured under the "always" and "madvise" settings, a no-op under "never").
// A decode step streams every weight once; on 4 KB pages that is a TLB miss every 4 KB. Measured on the
// AMD EPYC box (the products of SmolLM2's step at one row, panels): 8.9 ms on 4 KB pages, 7.5 ms on
// huge pages. Smaller tensors, or a failed allocation, take torch's allocator.
at::Tensor empty_huge(at::IntArrayRef sizes, const at::TensorOptions& options) {
  constexpr size_t HUGE_PAGE = size_t(2) << 20;
  const size_t bytes = size_t(c10::multiply_integers(sizes)) * sizeof(float);
  void* memory = nullptr;
  if (bytes < HUGE_PAGE || posix_memalign(&memory, HUGE_PAGE, bytes) != 0) return at::empty(sizes, options);
  madvise(memory, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);  // whole huge pages only: no tail waste
  return at::from_blob(memory, sizes, [](void* pointer) { std::free(pointer); }, options);
}

// rows [r0, r0 + R) x one panel pair (or one panel) over k in [k0, k1), accumulating into out.
// With `ahead` (the first row chunk of a k block), each step also asks for one line of the weights the
// next k block reads (ahead[0] and ahead[1] + the same offset): they arrive while the later row chunks
// reuse this block from L1, so only the first block of a product waits on memory.
template <int R, bool TWO>
inline void panel_micro(const float* x, int64_t K, const float* w0, const float* w1, int64_t k0, int64_t k1,
                        float* out, int64_t ldo, const float* const* ahead) {
  vec a0[R], a1[R];
  for (int r = 0; r < R; ++r) {
    a0[r] = k0 ? load(out + r * ldo) : vec{};
    a1[r] = (TWO && k0) ? load(out + r * ldo + P) : vec{};
  }
  for (int64_t k = k0; k < k1; ++k) {
    if (ahead != nullptr) {
      __builtin_prefetch(ahead[0] + (k - k0) * P, 0, 3);
      __builtin_prefetch(ahead[1] + (k - k0) * P, 0, 3);
    }
    const vec b0 = load(w0 + k * P);
    const vec b1 = TWO ? load(w1 + k * P) : vec{};
    for (int r = 0; r < R; ++r) {
      const float s = x[r * K + k];
      a0[r] += s * b0;
      if (TWO) a1[r] += s * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    store(out + r * ldo, a0[r]);
    if (TWO) store(out + r * ldo + P, a1[r]);
  }
}

template <bool TWO>
void panel_rows(const float* x, int64_t K, const float* w0, const float* w1, int64_t k0, int64_t k1, float* out,
                int64_t ldo, int rows, const float* const* ahead) {
  switch (rows) {
#define ENVSUITE_PANEL_CASE(R) \
  case R:                      \
    panel_micro<R, TWO>(x, K, w0, w1, k0, k1, out, ldo, ahead); \
    break;
    ENVSUITE_PANEL_CASE(1)
    ENVSUITE_PANEL_CASE(2)
    ENVSUITE_PANEL_CASE(3)
    ENVSUITE_PANEL_CASE(4)
#if defined(__AVX512F__)
    ENVSUITE_PANEL_CASE(5)
    ENVSUITE_PANEL_CASE(6)
    ENVSUITE_PANEL_CASE(7)
    ENVSUITE_PANEL_CASE(8)
    ENVSUITE_PANEL_CASE(9)
    ENVSUITE_PANEL_CASE(10)
    ENVSUITE_PANEL_CASE(11)
    ENVSUITE_PANEL_CASE(12)
#endif
#undef ENVSUITE_PANEL_CASE
    default:
      TORCH_CHECK(false, "panel_linear: bad row chunk");
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------ rows

at::Tensor rows_linear(const at::Tensor& x_in, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  check_product(x_in, w, "rows_linear");
  const at::Tensor x = x_in.contiguous();
  const int64_t K = w.size(1), N = w.size(0);
  TORCH_CHECK(x.size(-1) == K, "rows_linear: input width ", x.size(-1), " != weight width ", K);
  const int64_t M = K ? x.numel() / K : 0;
  auto shape = x.sizes().vec();
  shape.back() = N;
  at::Tensor out = at::empty(shape, x.options());
  const float* xp = x.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  constexpr int NR = 4;
  const int64_t blocks = (N + NR - 1) / NR;
  at::parallel_for(0, blocks, grain(2 * M * K * NR), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * NR;
      if (n0 + NR <= N) {
        rows_block<NR>(xp, wp, op, M, K, N, n0);
      } else {
        for (int64_t n = n0; n < N; ++n) rows_block<1>(xp, wp, op, M, K, N, n);
      }
    }
  });
  return with_bias(out, bias);
}

// ------------------------------------------------------------------------------------------ panels

at::Tensor pack_panels(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_panels: a 2-D float32 weight");
  const int64_t N = w.size(0), K = w.size(1);
  const int64_t pad = (P - N % P) % P;
  at::Tensor padded = pad ? at::cat({w, w.new_zeros({pad, K})}) : w;
  at::Tensor panels = empty_huge({(N + pad) / P, K, P}, w.options());
  panels.copy_(padded.view({-1, P, K}).transpose(1, 2));
  return panels;
}

at::Tensor panel_linear(const at::Tensor& x_in, const at::Tensor& panels, int64_t N,
                        const std::optional<at::Tensor>& bias) {
  check_product(x_in, panels, "panel_linear");
  TORCH_CHECK(panels.dim() == 3 && panels.size(2) == P, "panel_linear: panels of shape (N / 16, K, 16)");
  const at::Tensor x = x_in.contiguous();
  const int64_t K = panels.size(1), npanels = panels.size(0);
  TORCH_CHECK(x.size(-1) == K, "panel_linear: input width ", x.size(-1), " != weight width ", K);
  TORCH_CHECK(N > (npanels - 1) * P && N <= npanels * P, "panel_linear: ", N, " columns in ", npanels, " panels");
  const int64_t M = K ? x.numel() / K : 0;
  const int64_t ldo = npanels * P;
  at::Tensor out = at::empty({M, ldo}, x.options());
  const float* xp = x.const_data_ptr<float>();
  const float* wp = panels.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t pairs = (npanels + 1) / 2;
  const int64_t chunk = M <= DECODE_ROWS ? MR_DECODE : MR;
  at::parallel_for(0, pairs, grain(2 * M * K * 2 * P), [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t p0 = 2 * pair;
      const bool two = p0 + 1 < npanels;
      const float* w0 = wp + p0 * K * P;
      const float* w1 = w0 + K * P;
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t k1 = std::min(K, k0 + KC);
        // The next k block of this pair, else the first of the next pair (past the last panel: a prefetch
        // never faults).
        const float* ahead[2];
        if (k1 < K) {
          ahead[0] = w0 + k1 * P;
          ahead[1] = w1 + k1 * P;
        } else {
          ahead[0] = w0 + 2 * K * P;
          ahead[1] = w1 + 2 * K * P;
        }
        for (int64_t r0 = 0; r0 < M; r0 += chunk) {
          const int rows = (int)std::min<int64_t>(chunk, M - r0);
          float* o = op + r0 * ldo + p0 * P;
          const float* const* first = r0 == 0 ? ahead : nullptr;
          if (two) {
            panel_rows<true>(xp + r0 * K, K, w0, w1, k0, k1, o, ldo, rows, first);
          } else {
            panel_rows<false>(xp + r0 * K, K, w0, w1, k0, k1, o, ldo, rows, first);
          }
        }
      }
    }
  });
  auto shape = x.sizes().vec();
  shape.back() = N;
  at::Tensor result = ldo == N ? out : out.narrow(1, 0, N).contiguous();
  return with_bias(result.view(shape), bias);
}

}  // namespace envsuite
