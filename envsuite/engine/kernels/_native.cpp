// envsuite's native CPU kernels: matrix products for the skinny inputs of a decode step, and the step
// itself (envsuite/engine/kernels/_native.py builds this file on first use, for the CPU it runs on).
//
// Products, fp32, out = x @ W.T (+ bias), x (M, K) row-major:
//   rows_linear   W plain (N, K) row-major; each W row is read once for all M rows of x (M small:
//                 a decode step of 1-8 rows is a stream over the weights, as fast as memory allows).
//   panel_linear  W as panels (ceil(N / 16), K, 16): 16 output columns' weights interleaved by k, so one
//                 vector load gives 16 columns' weights at one k. A microkernel keeps up to MR rows x 32
//                 columns of accumulators in registers (MR_DECODE for a decode step's 9-48 rows); every
//                 weight is read once per chunk of rows (once in all for one chunk) and sequentially, so it
//                 serves 1 to thousands of rows on one layout.
// The sums run over k in order (one accumulator per output), so values equal another library's up to
// float rounding.
//
// The decode step's other parts (rms_norm, decode_attention: below) replace torch operations whose
// per-call overhead, at a decode step's sizes, is most of their time; decode_layers runs every decoder
// layer of a step in one call (the step captured: no Python between its ~700 operations).
//
// The vector type is GCC's generic vector of 16 floats: one AVX-512 register, two AVX2 ones, four NEON
// or SSE ones; the compiler emits the host's instructions (-march=native), so the same source serves
// every CPU it is built on.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace envsuite {
namespace {

constexpr int64_t P = 16;  // floats per panel (and per vector)
typedef float vec __attribute__((vector_size(P * sizeof(float))));

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

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof(vec));
  return v;
}
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof(vec)); }
inline vec splat(float v) { return vec{} + v; }

typedef int32_t ivec __attribute__((vector_size(P * sizeof(int32_t))));

// e^x in every lane, within ~1 ulp of std::exp for x in [-87.3, 88.7] (Cephes' expf: x = n ln2 + r with
// ln2 split in two, a degree-6 polynomial for e^r, 2^n put in the exponent bits); 0 below that range,
// e^88.7 above it. std::exp one value at a time was most of SiLU's and the softmax's time (a step at 32
// rows computes ~1.5 million of them).
inline vec vexp(vec x) {
  const vec lo = splat(-87.33654f), hi = splat(88.72283f);
  vec xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const vec magic = splat(12582912.0f);  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const vec n = (xc * 1.44269504088896341f + magic) - magic;
  vec r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vec poly = splat(1.9875691500e-4f);
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * (r * r) + r + 1.0f;
  const ivec bits = (__builtin_convertvector(n, ivec) + 127) << 23;
  vec scale;
  std::memcpy(&scale, &bits, sizeof(vec));
  const vec out = poly * scale;
  return x < lo ? vec{} : out;
}

// Lanes of x and y (indices 16-31 name y's) picked into one vector: clang and GCC 12+ spell it
// __builtin_shufflevector, older GCC __builtin_shuffle.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define ENVSUITE_SHUFFLE2(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define ENVSUITE_SHUFFLE2(x, y, ...) __builtin_shuffle(x, y, ivec{__VA_ARGS__})
#endif
#define ENVSUITE_SHUFFLE(v, ...) ENVSUITE_SHUFFLE2(v, v, __VA_ARGS__)

// The sum of a vector's lanes as a tree of shuffles and adds (4 dependent steps; adding the 16 lanes in
// order was a chain of 16 dependent scalar adds, which made the attention scores latency-bound).
inline float hsum(vec v) {
  v += ENVSUITE_SHUFFLE(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += ENVSUITE_SHUFFLE(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v += ENVSUITE_SHUFFLE(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v += ENVSUITE_SHUFFLE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return v[0];
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

at::Tensor pack_panels(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_panels: a 2-D float32 weight");
  const int64_t N = w.size(0), K = w.size(1);
  const int64_t pad = (P - N % P) % P;
  at::Tensor padded = pad ? at::cat({w, w.new_zeros({pad, K})}) : w;
  at::Tensor panels = empty_huge({(N + pad) / P, K, P}, w.options());
  panels.copy_(padded.view({-1, P, K}).transpose(1, 2));
  return panels;
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

// ------------------------------------------------------------------------------------------ decode step

// transformers' LlamaRMSNorm on fp32 rows: out = w * (x * rsqrt(mean(x^2) + eps)), one pass per row
// (torch's CPU rms_norm runs six operations, ~20 us each call at a decode step's sizes).
at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& w, double eps) {
  TORCH_CHECK(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat, "rms_norm: fp32 CPU input");
  TORCH_CHECK(w.scalar_type() == at::kFloat && w.is_contiguous(), "rms_norm: a contiguous fp32 weight");
  const at::Tensor x = x_in.contiguous();
  const int64_t D = w.numel();
  TORCH_CHECK(x.size(-1) == D, "rms_norm: width ", x.size(-1), " != weight ", D);
  const int64_t rows = D ? x.numel() / D : 0;
  at::Tensor out = at::empty_like(x);
  const float* xp = x.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  at::parallel_for(0, rows, grain(4 * D), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * D;
      float* o = op + r * D;
      const int64_t dv = D - D % P;
      vec acc = {};
      for (int64_t d = 0; d < dv; d += P) {
        const vec xv = load(xr + d);
        acc += xv * xv;
      }
      float ss = hsum(acc);
      for (int64_t d = dv; d < D; ++d) ss += xr[d] * xr[d];
      const float scale = 1.f / std::sqrt(ss / (float)D + (float)eps);
      for (int64_t d = 0; d < D; ++d) o[d] = wp[d] * (xr[d] * scale);
    }
  });
  return out;
}

// The rows' query, key and value heads out of a fused q/k/v product, the query and key heads rotated
// (rotary embeddings, transformers' rotate_half convention: x * cos + rotate_half(x) * sin).
// qkv (rows, ..., (H + 2 * KV) * D) contiguous; cos, sin: rows x D floats each, contiguous. Returns
// q (rows, H, 1, D), k and v (rows, KV, 1, D), contiguous: the views and the seven elementwise
// operations of torch's way in one pass.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_split(const at::Tensor& qkv_in, const at::Tensor& cos_in,
                                                           const at::Tensor& sin_in, int64_t H, int64_t KV) {
  TORCH_CHECK(qkv_in.scalar_type() == at::kFloat && cos_in.scalar_type() == at::kFloat &&
                  sin_in.scalar_type() == at::kFloat,
              "rotary_split: float32 only");
  const at::Tensor qkv = qkv_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const int64_t width = qkv.size(-1), heads = H + 2 * KV, D = width / heads;
  TORCH_CHECK(D * heads == width && D % 2 == 0, "rotary_split: width ", width, " is not ", heads, " even heads");
  const int64_t rows = qkv.numel() / width;
  TORCH_CHECK(cos.numel() == rows * D && sin.numel() == rows * D, "rotary_split: cos/sin of rows x ", D);
  at::Tensor q = at::empty({rows, H, 1, D}, qkv.options());
  at::Tensor k = at::empty({rows, KV, 1, D}, qkv.options());
  at::Tensor v = at::empty({rows, KV, 1, D}, qkv.options());
  const float* src = qkv.const_data_ptr<float>();
  const float* cp = cos.const_data_ptr<float>();
  const float* sp = sin.const_data_ptr<float>();
  float* qp = q.mutable_data_ptr<float>();
  float* kp = k.mutable_data_ptr<float>();
  float* vp = v.mutable_data_ptr<float>();
  const int64_t half = D / 2;
  at::parallel_for(0, rows, grain(4 * width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cp + r * D;
      const float* s = sp + r * D;
      for (int64_t h = 0; h < H + KV; ++h) {
        const float* x = src + r * width + h * D;
        float* o = h < H ? qp + (r * H + h) * D : kp + (r * KV + h - H) * D;
        for (int64_t d = 0; d < half; ++d) o[d] = x[d] * c[d] + (-x[d + half]) * s[d];
        for (int64_t d = half; d < D; ++d) o[d] = x[d] * c[d] + x[d - half] * s[d];
      }
      std::memcpy(vp + r * KV * D, src + r * width + (H + KV) * D, KV * D * sizeof(float));
    }
  });
  return {q, k, v};
}

// SiLU(gate) * up for a fused gate/up product's output (rows, ..., 2 * I): (rows, ..., I), one pass
// instead of torch's chunk, silu and multiply.
at::Tensor silu_mul(const at::Tensor& gate_up_in) {
  TORCH_CHECK(gate_up_in.scalar_type() == at::kFloat, "silu_mul: float32 only");
  const at::Tensor gate_up = gate_up_in.contiguous();
  const int64_t width = gate_up.size(-1), I = width / 2;
  TORCH_CHECK(width % 2 == 0, "silu_mul: an even width");
  const int64_t rows = width ? gate_up.numel() / width : 0;
  auto shape = gate_up.sizes().vec();
  shape.back() = I;
  at::Tensor out = at::empty(shape, gate_up.options());
  const float* src = gate_up.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  at::parallel_for(0, rows, grain(8 * I), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = src + r * width;
      const float* u = g + I;
      float* o = op + r * I;
      const int64_t iv = I - I % P;
      for (int64_t i = 0; i < iv; i += P) {
        const vec gv = load(g + i);
        store(o + i, gv / (1.f + vexp(-gv)) * load(u + i));
      }
      for (int64_t i = iv; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    }
  });
  return out;
}

// 16 vectors -> one vector whose lane i is the sum of the lanes of a[bit_reversed[i]]: a butterfly of 15
// adds, halving the lanes each vector's partial sum spans at each of 4 levels (a lane sum each, hsum,
// would take 60 adds and shuffles).
constexpr int bit_reversed[P] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
inline vec transposed_sums(const vec* a) {
  vec b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)
    b[i] = ENVSUITE_SHUFFLE2(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           ENVSUITE_SHUFFLE2(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    c[i] = ENVSUITE_SHUFFLE2(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           ENVSUITE_SHUFFLE2(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    d[i] = ENVSUITE_SHUFFLE2(c[2 * i], c[2 * i + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           ENVSUITE_SHUFFLE2(c[2 * i], c[2 * i + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  return ENVSUITE_SHUFFLE2(d[0], d[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
         ENVSUITE_SHUFFLE2(d[0], d[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

// One (row, kv head) of decode_attention: G queries against L keys, D = 16 * DV floats per head. Scores
// come 16 keys at a time (one transposed_sums per block, the keys read from L1 for each query); each
// value row is read once for all G queries (vector registers: G x DV accumulators).
template <int DV>
void attend_head(const float* q, const float* k, int64_t kl, const float* v, int64_t vl, const bool* mask,
                 int64_t G, int64_t L, float scale, float* scores, float* out, const float* next_k,
                 const float* next_v) {
  constexpr int64_t D = DV * P;
  const int64_t blocks_end = L - L % P;
  // The next (row, head)'s keys and values are short streams elsewhere in the cache: asked for now, row
  // by row beside this one's scores, they arrive while this head computes (the hardware prefetcher
  // alone starts each stream cold).
  if (next_k != nullptr)
    for (int64_t l = 0; l < L; ++l)
      for (int j = 0; j < DV; ++j) {
        __builtin_prefetch(next_k + l * kl + j * P, 0, 2);
        __builtin_prefetch(next_v + l * vl + j * P, 0, 2);
      }
  for (int64_t g = 0; g < G; ++g) {
    vec qv[DV];
    for (int j = 0; j < DV; ++j) qv[j] = load(q + g * D + j * P);
    float* s = scores + g * L;
    for (int64_t l0 = 0; l0 < blocks_end; l0 += P) {
      vec acc[P];
      for (int i = 0; i < P; ++i) {
        const float* key = k + (l0 + i) * kl;
        vec dot = qv[0] * load(key);
        for (int j = 1; j < DV; ++j) dot += qv[j] * load(key + j * P);
        acc[bit_reversed[i]] = dot;
      }
      store(s + l0, transposed_sums(acc) * scale);
    }
    for (int64_t l = blocks_end; l < L; ++l) {
      const float* key = k + l * kl;
      vec dot = qv[0] * load(key);
      for (int j = 1; j < DV; ++j) dot += qv[j] * load(key + j * P);
      s[l] = hsum(dot) * scale;
    }
  }
  float inv[64];
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * L;
    if (mask)
      for (int64_t l = 0; l < L; ++l)
        if (!mask[l]) s[l] = minus_inf;  // not scored above; e^-inf = 0 below
    float top = minus_inf;
    for (int64_t l = 0; l < L; ++l) top = std::max(top, s[l]);
    if (top == minus_inf) {  // every position masked: zeros
      std::fill(s, s + L, 0.f);
      inv[g] = 0.f;
      continue;
    }
    vec partial = {};
    for (int64_t l = 0; l < blocks_end; l += P) {
      const vec e = vexp(load(s + l) - top);
      store(s + l, e);
      partial += e;
    }
    float total = hsum(partial);
    for (int64_t l = blocks_end; l < L; ++l) {
      s[l] = std::exp(s[l] - top);
      total += s[l];
    }
    inv[g] = total > 0.f ? 1.f / total : 0.f;
  }
  for (int64_t g0 = 0; g0 < G; g0 += 4) {
    const int64_t gs = std::min<int64_t>(4, G - g0);
    vec acc[4][DV] = {};
    for (int64_t l = 0; l < L; ++l) {
      if (mask && !mask[l]) continue;
      vec vv[DV];
      for (int j = 0; j < DV; ++j) vv[j] = load(v + l * vl + j * P);
      for (int64_t g = 0; g < gs; ++g) {
        const float p = scores[(g0 + g) * L + l];
        for (int j = 0; j < DV; ++j) acc[g][j] += p * vv[j];
      }
    }
    for (int64_t g = 0; g < gs; ++g)
      for (int j = 0; j < DV; ++j) store(out + (g0 + g) * D + j * P, acc[g][j] * inv[g0 + g]);
  }
}

// One-token attention for every row of a decode step, grouped-query: q (B, H, G, D), the G query heads
// of each of H key/value heads; k and v (B, H, L, D) with unit stride in D (views of the KV cache's
// buffers); mask (B, L) bool, true where a row attends (None: every position). Per (row, kv head): the
// G x L scores, a softmax per query (max subtracted), the weighted sum of values. Rows fully masked
// give zeros (the engine never has one: a row's own new position is always real). Head sizes of 16 to
// 128 floats in steps of 16, at most 64 query heads per key/value head.
bool decode_attention_fits(int64_t D, int64_t G) { return D % P == 0 && D > 0 && D <= 8 * P && G <= 64; }

at::Tensor decode_attention(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& mask_in, double scale) {
  TORCH_CHECK(q_in.dim() == 4 && k.dim() == 4 && v.dim() == 4, "decode_attention: 4-D q, k, v");
  TORCH_CHECK(q_in.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "decode_attention: float32 only");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "decode_attention: keys and values with unit stride in D");
  const at::Tensor q = q_in.contiguous();
  const int64_t B = q.size(0), H = q.size(1), G = q.size(2), D = q.size(3), L = k.size(2);
  TORCH_CHECK(decode_attention_fits(D, G),
              "decode_attention: head size a multiple of 16 up to 128, at most 64 query heads per group");
  TORCH_CHECK(k.size(0) == B && k.size(1) == H && k.size(3) == D && v.sizes() == k.sizes(),
              "decode_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  at::Tensor mask;
  const bool* mp = nullptr;
  if (mask_in.has_value() && mask_in->defined()) {
    mask = mask_in->to(at::kBool).contiguous();
    TORCH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == L, "decode_attention: mask (B, L)");
    mp = mask.const_data_ptr<bool>();
  }
  at::Tensor out = at::empty({B, H, G, D}, q.options());
  const float* qp = q.const_data_ptr<float>();
  const float* kp = k.const_data_ptr<float>();
  const float* vp = v.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const float fscale = (float)scale;
  at::parallel_for(0, B * H, grain(4 * G * L * D), [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * L);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H, h = item % H;
      const float* qh = qp + (b * H + h) * G * D;
      const float* kh = kp + b * k.stride(0) + h * k.stride(1);
      const float* vh = vp + b * v.stride(0) + h * v.stride(1);
      const int64_t nb = (item + 1) / H, nh = (item + 1) % H;
      const float* next_k = item + 1 < end ? kp + nb * k.stride(0) + nh * k.stride(1) : nullptr;
      const float* next_v = item + 1 < end ? vp + nb * v.stride(0) + nh * v.stride(1) : nullptr;
      const bool* row_mask = mp ? mp + b * L : nullptr;
      float* oh = op + (b * H + h) * G * D;
      switch (D / P) {
#define ENVSUITE_HEAD_CASE(DV)                                                                      \
  case DV:                                                                                          \
    attend_head<DV>(qh, kh, k.stride(2), vh, v.stride(2), row_mask, G, L, fscale, scores.data(), oh, next_k, next_v); \
    break;
        ENVSUITE_HEAD_CASE(1)
        ENVSUITE_HEAD_CASE(2)
        ENVSUITE_HEAD_CASE(3)
        ENVSUITE_HEAD_CASE(4)
        ENVSUITE_HEAD_CASE(5)
        ENVSUITE_HEAD_CASE(6)
        ENVSUITE_HEAD_CASE(7)
        ENVSUITE_HEAD_CASE(8)
#undef ENVSUITE_HEAD_CASE
      }
    }
  });
  return out;
}


// ------------------------------------------------------------------------------------------ captured step

// How decode_layers runs each product (envsuite.engine.kernels.ProductPath, by number: see
// envsuite/engine/sampling/_captured_step.py, which passes them).
enum ProductCode : int64_t { F_LINEAR = 0, ONEDNN = 1, ROWS = 2, PANELS = 3 };

// oneDNN's linear op (what torch.ops.mkldnn._linear_pointwise runs), through the dispatcher: the weight
// plain or in oneDNN's reordered layout.
at::Tensor onednn_product(const at::Tensor& x, const at::Tensor& w) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  torch::jit::Stack stack;
  stack.reserve(6);
  stack.emplace_back(x);
  stack.emplace_back(w);
  stack.emplace_back(c10::IValue());
  stack.emplace_back(std::string("none"));
  stack.emplace_back(c10::List<std::optional<at::Scalar>>());
  stack.emplace_back(std::string(""));
  op.callBoxed(&stack);
  return stack.back().toTensor();
}

at::Tensor product(const at::Tensor& x, const at::Tensor& w, int64_t code, int64_t N) {
  switch (code) {
    case F_LINEAR:
      return at::linear(x, w);
    case ONEDNN:
      return onednn_product(x, w);
    case ROWS:
      return rows_linear(x, w, std::nullopt);
    case PANELS:
      return panel_linear(x, w, N, std::nullopt);
    default:
      TORCH_CHECK(false, "decode_layers: unknown product code ", code);
  }
}

// Every decoder layer of a Llama decode step, one token per row, in one call: for each layer, RMS norm,
// the fused q/k/v product, rotary embeddings, the new keys and values written into the cache's column
// `end`, one-token grouped attention over columns [start, end], the output product added to the
// residual stream, RMS norm, the fused gate/up product, SiLU(gate) * up, the down product added. The
// same functions, in the same order, as the lean step's Python (_llama_decode.py) calls one by one, so
// the values are the same.
//   hidden (B, 1, hidden_size); cos, sin (B, 1, head_dim); mask (B, end + 1 - start) bool or None.
//   weights: per layer input_norm, qkv, o, post_norm, gate_up, down (products in their layouts, no
//   biases); paths: per layer the four products' ProductCode.
//   keys[l], values[l]: layer l's cache buffers (rows, kv_heads, columns, head_dim), unit stride in
//   head_dim, with column `end` free for rows [0, B).
// Returns the residual stream after the last layer (B, 1, hidden_size); the caller advances the cache.
at::Tensor decode_layers(const at::Tensor& hidden_in, const at::Tensor& cos, const at::Tensor& sin,
                         const std::optional<at::Tensor>& mask, at::TensorList weights, at::IntArrayRef paths,
                         at::TensorList keys, at::TensorList values, int64_t start, int64_t end, int64_t heads,
                         int64_t kv_heads, int64_t intermediate, double eps, double scale) {
  const int64_t layers = (int64_t)keys.size();
  TORCH_CHECK((int64_t)values.size() == layers && (int64_t)weights.size() == 6 * layers &&
                  (int64_t)paths.size() == 4 * layers,
              "decode_layers: per layer 6 weights, 4 paths, one key and one value buffer");
  TORCH_CHECK(hidden_in.scalar_type() == at::kFloat && hidden_in.device().is_cpu(), "decode_layers: fp32 CPU");
  const int64_t B = hidden_in.size(0), width = hidden_in.size(-1);
  TORCH_CHECK(hidden_in.numel() == B * width, "decode_layers: one token per row");
  at::Tensor hidden = hidden_in.reshape({B, width}).clone();  // the residual stream, updated in place
  const int64_t G = heads / kv_heads;
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor* w = weights.data() + 6 * l;
    const int64_t* code = paths.data() + 4 * l;
    const at::Tensor& key_buffer = keys[l];
    const at::Tensor& value_buffer = values[l];
    TORCH_CHECK(key_buffer.stride(3) == 1 && value_buffer.stride(3) == 1 && key_buffer.size(0) >= B &&
                    end < key_buffer.size(2) && start <= end,
                "decode_layers: layer ", l, "'s cache has no free column ", end, " for ", B, " rows");
    const int64_t D = key_buffer.size(3);
    at::Tensor x = rms_norm(hidden, w[0], eps);
    at::Tensor qkv = product(x, w[1], code[0], (heads + 2 * kv_heads) * D);
    auto [q, k, v] = rotary_split(qkv, cos, sin, heads, kv_heads);
    at::Tensor key_rows = key_buffer.narrow(0, 0, B);
    at::Tensor value_rows = value_buffer.narrow(0, 0, B);
    key_rows.select(2, end).copy_(k.select(2, 0));
    value_rows.select(2, end).copy_(v.select(2, 0));
    at::Tensor attn = decode_attention(q.view({B, kv_heads, G, D}), key_rows.narrow(2, start, end + 1 - start),
                                       value_rows.narrow(2, start, end + 1 - start), mask, scale);
    hidden.add_(product(attn.view({B, heads * D}), w[2], code[1], width));
    x = rms_norm(hidden, w[3], eps);
    at::Tensor mlp = silu_mul(product(x, w[4], code[2], 2 * intermediate));
    hidden.add_(product(mlp, w[5], code[3], width));
  }
  return hidden.view({B, 1, width});
}

}  // namespace
}  // namespace envsuite

TORCH_LIBRARY(envsuite, m) {
  m.def("rows_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("pack_panels(Tensor weight) -> Tensor");
  m.def("panel_linear(Tensor x, Tensor panels, int out_features, Tensor? bias) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale) -> Tensor");
  m.def("rotary_split(Tensor qkv, Tensor cos, Tensor sin, int heads, int kv_heads) -> (Tensor, Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def(
      "decode_layers(Tensor hidden, Tensor cos, Tensor sin, Tensor? mask, Tensor[] weights, int[] paths, "
      "Tensor[] keys, Tensor[] values, int start, int end, int heads, int kv_heads, int intermediate, float eps, "
      "float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(envsuite, CPU, m) {
  m.impl("rows_linear", &envsuite::rows_linear);
  m.impl("pack_panels", &envsuite::pack_panels);
  m.impl("panel_linear", &envsuite::panel_linear);
  m.impl("rms_norm", &envsuite::rms_norm);
  m.impl("decode_attention", &envsuite::decode_attention);
  m.impl("rotary_split", &envsuite::rotary_split);
  m.impl("silu_mul", &envsuite::silu_mul);
  m.impl("decode_layers", &envsuite::decode_layers);
}

// A stack whose products hold oneDNN's reordered (opaque mkldnn) weights dispatches on that key.
TORCH_LIBRARY_IMPL(envsuite, MkldnnCPU, m) { m.impl("decode_layers", &envsuite::decode_layers); }
