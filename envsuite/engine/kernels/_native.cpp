// envsuite's native CPU kernels: matrix products for the skinny inputs of a decode step, and the step
// itself (envsuite/engine/kernels/_native.py builds this file on first use, for the CPU it runs on).
//
// Products, fp32, out = x @ W.T (+ bias), x (M, K) row-major:
//   rows_linear   W plain (N, K) row-major; each W row is read once for all M rows of x (M small:
//                 a decode step of 1-8 rows is a stream over the weights, as fast as memory allows).
//   panel_linear  W as panels (ceil(N / 16), K, 16): 16 output columns' weights interleaved by k, so one
//                 vector load gives 16 columns' weights at one k. A microkernel keeps MR rows x 32 columns
//                 of accumulators in registers; every weight is read once per MR rows (once in all for
//                 M <= MR) and sequentially, so it serves 1 to thousands of rows on one layout.
// The sums run over k in order (one accumulator per output), so values equal another library's up to
// float rounding.
//
// The vector type is GCC's generic vector of 16 floats: one AVX-512 register, two AVX2 ones, four NEON
// or SSE ones; the compiler emits the host's instructions (-march=native), so the same source serves
// every CPU it is built on.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

namespace envsuite {
namespace {

constexpr int64_t P = 16;  // floats per panel (and per vector)
typedef float vec __attribute__((vector_size(P * sizeof(float))));

#if defined(__AVX512F__)
constexpr int MR = 8;  // rows per microkernel: 8 x 2 accumulators + 2 weights of 32 registers
#else
constexpr int MR = 4;  // 16 or fewer vector registers
#endif
constexpr int64_t KC = 256;  // k block: a panel pair's 256 x 32 floats (32 KB) stay in L1 across row chunks

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof(vec));
  return v;
}
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof(vec)); }
inline float hsum(vec v) {
  float s = 0.f;
  for (int i = 0; i < P; ++i) s += v[i];
  return s;
}

// Work below which at::parallel_for stays on one thread (a parallel region costs a few microseconds).
int64_t grain(int64_t flops_per_item) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, flops_per_item)); }

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
  return padded.view({-1, P, K}).transpose(1, 2).contiguous();
}

// rows [r0, r0 + R) x one panel pair (or one panel) over k in [k0, k1), accumulating into out.
template <int R, bool TWO>
inline void panel_micro(const float* x, int64_t K, const float* w0, const float* w1, int64_t k0, int64_t k1,
                        float* out, int64_t ldo) {
  vec a0[R], a1[R];
  for (int r = 0; r < R; ++r) {
    a0[r] = k0 ? load(out + r * ldo) : vec{};
    a1[r] = (TWO && k0) ? load(out + r * ldo + P) : vec{};
  }
  for (int64_t k = k0; k < k1; ++k) {
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
                int64_t ldo, int rows) {
  switch (rows) {
#define ENVSUITE_PANEL_CASE(R) \
  case R:                      \
    panel_micro<R, TWO>(x, K, w0, w1, k0, k1, out, ldo); \
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
#endif
#undef ENVSUITE_PANEL_CASE
    default:
      TORCH_CHECK(false, "panel_linear: bad row chunk");
  }
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
  at::parallel_for(0, pairs, grain(2 * M * K * 2 * P), [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t p0 = 2 * pair;
      const bool two = p0 + 1 < npanels;
      const float* w0 = wp + p0 * K * P;
      const float* w1 = w0 + K * P;
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t k1 = std::min(K, k0 + KC);
        for (int64_t r0 = 0; r0 < M; r0 += MR) {
          const int rows = (int)std::min<int64_t>(MR, M - r0);
          float* o = op + r0 * ldo + p0 * P;
          if (two) {
            panel_rows<true>(xp + r0 * K, K, w0, w1, k0, k1, o, ldo, rows);
          } else {
            panel_rows<false>(xp + r0 * K, K, w0, w1, k0, k1, o, ldo, rows);
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

}  // namespace
}  // namespace envsuite

TORCH_LIBRARY(envsuite, m) {
  m.def("rows_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("pack_panels(Tensor weight) -> Tensor");
  m.def("panel_linear(Tensor x, Tensor panels, int out_features, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(envsuite, CPU, m) {
  m.impl("rows_linear", &envsuite::rows_linear);
  m.impl("pack_panels", &envsuite::pack_panels);
  m.impl("panel_linear", &envsuite::panel_linear);
}
