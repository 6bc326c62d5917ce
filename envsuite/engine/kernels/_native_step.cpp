// The decode step's kernels besides the products (rms_norm, rotary_split, silu_mul, decode_attention:
// each replaces torch operations whose per-call overhead, at a decode step's sizes, is most of their
// time). Each op shares out its rows (or items) with at::parallel_for; the row-level pieces it runs
// (rms_norm_rows, rotary_rows, silu_mul_span, DecodeAttention::item) are what decode_layers'
// team (_native_layers.cpp) runs too, so the two give the same values.
#include <ATen/Parallel.h>

#include <limits>
#include <vector>

#include "_native.h"

namespace envsuite {

// transformers' LlamaRMSNorm on fp32 rows: out = w * (x * rsqrt(mean(x^2) + eps)), one pass per row
// (torch's CPU rms_norm runs six operations, ~20 us each call at a decode step's sizes).
void rms_norm_rows(const float* x, const float* w, float* out, int64_t D, float eps, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * D;
    float* o = out + r * D;
    const int64_t dv = D - D % P;
    vec acc = {};
    for (int64_t d = 0; d < dv; d += P) {
      const vec xv = load(xr + d);
      acc += xv * xv;
    }
    float ss = hsum(acc);
    for (int64_t d = dv; d < D; ++d) ss += xr[d] * xr[d];
    const float scale = 1.f / std::sqrt(ss / (float)D + eps);
    for (int64_t d = 0; d < D; ++d) o[d] = w[d] * (xr[d] * scale);
  }
}

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
    rms_norm_rows(xp, wp, op, D, (float)eps, begin, end);
  });
  return out;
}

// The rows' query, key and value heads out of a fused q/k/v product, the query and key heads rotated
// (rotary embeddings, transformers' rotate_half convention: x * cos + rotate_half(x) * sin).
// qkv (rows, ..., (H + 2 * KV) * D) contiguous; cos, sin: rows x D floats each, contiguous. Returns
// q (rows, H, 1, D), k and v (rows, KV, 1, D), contiguous: the views and the seven elementwise
// operations of torch's way in one pass.
void rotary_rows(const float* qkv, const float* cos, const float* sin, float* q, float* k, float* v, int64_t H,
                 int64_t KV, int64_t D, int64_t begin, int64_t end) {
  const int64_t width = (H + 2 * KV) * D, half = D / 2;
  for (int64_t r = begin; r < end; ++r) {
    const float* c = cos + r * D;
    const float* s = sin + r * D;
    for (int64_t h = 0; h < H + KV; ++h) {
      const float* x = qkv + r * width + h * D;
      float* o = h < H ? q + (r * H + h) * D : k + (r * KV + h - H) * D;
      for (int64_t d = 0; d < half; ++d) o[d] = x[d] * c[d] + (-x[d + half]) * s[d];
      for (int64_t d = half; d < D; ++d) o[d] = x[d] * c[d] + x[d - half] * s[d];
    }
    std::memcpy(v + r * KV * D, qkv + r * width + (H + KV) * D, KV * D * sizeof(float));
  }
}

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
  at::parallel_for(0, rows, grain(4 * width), [&](int64_t begin, int64_t end) {
    rotary_rows(src, cp, sp, qp, kp, vp, H, KV, D, begin, end);
  });
  return {q, k, v};
}

void silu_mul_span(const float* gate, const float* up, float* out, int64_t begin, int64_t end, int64_t n) {
  // vexp over [0, n - n % 16), std::exp past it, wherever a span starts or ends: a value is the same
  // whichever span computes it (the ops of a lane do not depend on its neighbours).
  const int64_t nv = n - n % P;
  int64_t i = begin;
  for (; i + P <= std::min(end, nv); i += P) {
    const vec g = load(gate + i);
    store(out + i, g / (1.f + vexp(-g)) * load(up + i));
  }
  for (; i < end; ++i) {
    const float e = i < nv ? vexp(splat(-gate[i]))[0] : std::exp(-gate[i]);
    out[i] = gate[i] / (1.f + e) * up[i];
  }
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
    for (int64_t r = begin; r < end; ++r) silu_mul_span(src + r * width, src + r * width + I, op + r * I, 0, I, I);
  });
  return out;
}

// ------------------------------------------------------------------------------------------ attention

namespace {

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

// Whether 16 positions of a row's mask are all padding: their keys need not be read. A row's padding is
// where the batch's longer rows have tokens (left padding, and rows that joined the batch later), so
// in a batch of very different lengths most of a short row's columns are skipped whole.
inline bool block_masked(const bool* mask) {
  uint64_t first, second;
  std::memcpy(&first, mask, 8);
  std::memcpy(&second, mask + 8, 8);
  return (first | second) == 0;
}

// One (row, kv head) of decode_attention: G queries against L keys, D = 16 * DV floats per head. Scores
// come 16 keys at a time (one transposed_sums per block, the keys read from L1 for each query); each
// value row is read once for all G queries (vector registers: G x DV accumulators).
template <int DV>
void attend_head(const float* q, const float* k, int64_t kl, const float* v, int64_t vl, const bool* mask,
                 int64_t G, int64_t L, float scale, float* scores, float* out, const float* next_k,
                 const bool* next_mask) {
  constexpr int64_t D = DV * P;
  const int64_t blocks_end = L - L % P;
  // Read-ahead, so that each stream is asked for while the core computes on data it already holds:
  // this head's values, a share of positions per block of scores (the scores' later passes run on keys
  // in L1); the next (row, head)'s keys, one position per position of the weighted sum (they lie past
  // this head's spare columns, where no hardware prefetcher follows). Measured on the AMD EPYC box
  // (docs/benchmarks.md): a burst at each head's start was 10-12% slower than none; the next head's
  // keys and values spread over this head's scores and sum, 0.978-0.996 of none (the step, 4-64 rows);
  // this split against that, in one process: 0.961-0.993 at 16 rows (three runs), 0.987-0.989 at 32-64, 1.002
  // at 8, 1.020 at 4 (one run each).
  const int64_t score_steps = G * ((L + P - 1) / P);
  const int64_t values_per_step = (L + score_steps - 1) / score_steps;
  int64_t asked = 0;
  auto ask_values = [&]() {
    for (const int64_t stop = std::min(L, asked + values_per_step); asked < stop; ++asked) {
      if (mask != nullptr && !mask[asked]) continue;  // never read
      for (int j = 0; j < DV; ++j) __builtin_prefetch(v + asked * vl + j * P, 0, 2);
    }
  };
  for (int64_t g = 0; g < G; ++g) {
    vec qv[DV];
    for (int j = 0; j < DV; ++j) qv[j] = load(q + g * D + j * P);
    float* s = scores + g * L;
    for (int64_t l0 = 0; l0 < blocks_end; l0 += P) {
      ask_values();
      if (mask && block_masked(mask + l0)) continue;  // the mask pass below sets its 16 scores
      vec acc[P];
      for (int i = 0; i < P; ++i) {
        const float* key = k + (l0 + i) * kl;
        vec dot = qv[0] * load(key);
        for (int j = 1; j < DV; ++j) dot += qv[j] * load(key + j * P);
        acc[bit_reversed[i]] = dot;
      }
      store(s + l0, transposed_sums(acc) * scale);
    }
    if (blocks_end < L) {  // the last L % 16 keys as a block whose missing keys score 0 (not stored)
      ask_values();
      vec acc[P];
      for (int i = 0; i < P; ++i) {
        acc[bit_reversed[i]] = vec{};
        if (blocks_end + i >= L) continue;
        const float* key = k + (blocks_end + i) * kl;
        vec dot = qv[0] * load(key);
        for (int j = 1; j < DV; ++j) dot += qv[j] * load(key + j * P);
        acc[bit_reversed[i]] = dot;
      }
      const vec tail = transposed_sums(acc) * scale;
      std::memcpy(s + blocks_end, &tail, (L - blocks_end) * sizeof(float));
    }
  }
  float inv[64];
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * L;
    if (mask)
      for (int64_t l = 0; l < L; ++l)
        if (!mask[l]) s[l] = minus_inf;  // not scored above; e^-inf = 0 below
    // The last L % 16 scores padded with -inf (e^-inf = 0): every pass below runs on whole vectors
    // (a scalar max over the scores, one dependent max per key, and std::exp for the tail took ~15% of
    // attention's time with the keys in cache)
    const int64_t tail = L - blocks_end;
    vec last = splat(minus_inf);
    std::memcpy(&last, s + blocks_end, tail * sizeof(float));
    vec tops = last;
    for (int64_t l = 0; l < blocks_end; l += P) {
      const vec x = load(s + l);
      tops = x > tops ? x : tops;
    }
    const float top = hmax(tops);
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
    last = vexp(last - top);
    std::memcpy(s + blocks_end, &last, tail * sizeof(float));
    const float total = hsum(partial + last);
    inv[g] = total > 0.f ? 1.f / total : 0.f;
  }
  for (int64_t g0 = 0; g0 < G; g0 += 4) {
    const int64_t gs = std::min<int64_t>(4, G - g0);
    vec acc[4][DV] = {};
    for (int64_t l = 0; l < L; ++l) {
      if (g0 == 0 && next_k != nullptr && (next_mask == nullptr || next_mask[l]))
        for (int j = 0; j < DV; ++j) __builtin_prefetch(next_k + l * kl + j * P, 0, 2);
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

}  // namespace

void DecodeAttention::item(int64_t item, int64_t next, float* scores) const {
  const int64_t b = item / H, h = item % H;
  const float* qh = q + (b * H + h) * G * D;
  const float* kh = k + b * k_row + h * k_head;
  const float* vh = v + b * v_row + h * v_head;
  const float* next_k = nullptr;
  const bool* next_mask = nullptr;
  if (next >= 0) {
    const int64_t nb = next / H, nh = next % H;
    next_k = k + nb * k_row + nh * k_head;
    next_mask = mask ? mask + nb * L : nullptr;
  }
  const bool* row_mask = mask ? mask + b * L : nullptr;
  float* oh = out + (b * H + h) * G * D;
  switch (D / P) {
#define ENVSUITE_HEAD_CASE(DV)                                                                                  \
  case DV:                                                                                                      \
    attend_head<DV>(qh, kh, k_pos, vh, v_pos, row_mask, G, L, scale, scores, oh, next_k, next_mask); \
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
  const DecodeAttention attention{q.const_data_ptr<float>(), k.const_data_ptr<float>(), v.const_data_ptr<float>(),
                                  mp, k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
                                  B, H, G, D, L, (float)scale, out.mutable_data_ptr<float>()};
  at::parallel_for(0, B * H, grain(4 * G * L * D), [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * L);
    for (int64_t item = begin; item < end; ++item) attention.item(item, item + 1 < end ? item + 1 : -1, scores.data());
  });
  return out;
}

}  // namespace envsuite
