// The decode step's kernels besides the products (rms_norm, rotary_split, silu_mul, decode_attention:
// each replaces torch operations whose per-call overhead, at a decode step's sizes, is most of their
// time) and decode_layers, which runs every decoder layer of a step in one call (the step captured: no
// Python between its ~700 operations).
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <limits>
#include <vector>

#include "_native.h"

namespace envsuite {

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
                 const float* next_v, const bool* next_mask) {
  constexpr int64_t D = DV * P;
  const int64_t blocks_end = L - L % P;
  // The next (row, head)'s keys and values are short streams elsewhere in the cache: asked for now, row
  // by row beside this one's scores, they arrive while this head computes (the hardware prefetcher
  // alone starts each stream cold).
  if (next_k != nullptr)
    for (int64_t l = 0; l < L; ++l) {
      if (next_mask != nullptr && !next_mask[l]) continue;  // never read
      for (int j = 0; j < DV; ++j) {
        __builtin_prefetch(next_k + l * kl + j * P, 0, 2);
        __builtin_prefetch(next_v + l * vl + j * P, 0, 2);
      }
    }
  for (int64_t g = 0; g < G; ++g) {
    vec qv[DV];
    for (int j = 0; j < DV; ++j) qv[j] = load(q + g * D + j * P);
    float* s = scores + g * L;
    for (int64_t l0 = 0; l0 < blocks_end; l0 += P) {
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

}  // namespace

// One-token attention for every row of a decode step, grouped-query: q (B, H, G, D), the G query heads
// of each of H key/value heads; k and v (B, H, L, D) with unit stride in D (views of the KV cache's
// buffers); mask (B, L) bool, true where a row attends (None: every position). Per (row, kv head): the
// G x L scores, a softmax per query (max subtracted), the weighted sum of values. Rows fully masked
// give zeros (the engine never has one: a row's own new position is always real). Head sizes of 16 to
// 128 floats in steps of 16, at most 64 query heads per key/value head.
static bool decode_attention_fits(int64_t D, int64_t G) { return D % P == 0 && D > 0 && D <= 8 * P && G <= 64; }

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
      const bool* next_mask = mp && item + 1 < end ? mp + nb * L : nullptr;
      const bool* row_mask = mp ? mp + b * L : nullptr;
      float* oh = op + (b * H + h) * G * D;
      switch (D / P) {
#define ENVSUITE_HEAD_CASE(DV)                                                                      \
  case DV:                                                                                          \
    attend_head<DV>(qh, kh, k.stride(2), vh, v.stride(2), row_mask, G, L, fscale, scores.data(), oh, next_k, next_v, next_mask); \
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

namespace {

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

// dst += src over B x width floats, both contiguous: the residual add without a dispatch (one rounding
// per element, as torch's add_).
void add_rows(at::Tensor& dst, const at::Tensor& src_in) {
  const at::Tensor src = src_in.contiguous();
  TORCH_CHECK(src.numel() == dst.numel(), "decode_layers: a product of the wrong width");
  float* d = dst.mutable_data_ptr<float>();
  const float* s = src.const_data_ptr<float>();
  const int64_t n = dst.numel(), nv = n - n % P;
  for (int64_t i = 0; i < nv; i += P) store(d + i, load(d + i) + load(s + i));
  for (int64_t i = nv; i < n; ++i) d[i] += s[i];
}

// The new position's heads (B, KV, 1, D), contiguous, into column `column` of rows [0, B) of a cache
// buffer (rows, KV, columns, D) with unit stride in D: a copy per (row, head), without a dispatch.
void write_column(const at::Tensor& buffer, const at::Tensor& heads, int64_t column) {
  const int64_t B = heads.size(0), KV = heads.size(1), D = heads.size(3);
  const float* src = heads.const_data_ptr<float>();
  float* dst = buffer.mutable_data_ptr<float>() + column * buffer.stride(2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < KV; ++h)
      std::memcpy(dst + b * buffer.stride(0) + h * buffer.stride(1), src + (b * KV + h) * D, D * sizeof(float));
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

}  // namespace

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
                    value_buffer.size(0) >= B && end < key_buffer.size(2) && end < value_buffer.size(2) &&
                    start <= end,
                "decode_layers: layer ", l, "'s cache has no free column ", end, " for ", B, " rows");
    const int64_t D = key_buffer.size(3);
    at::Tensor x = rms_norm(hidden, w[0], eps);
    at::Tensor qkv = product(x, w[1], code[0], (heads + 2 * kv_heads) * D);
    auto [q, k, v] = rotary_split(qkv, cos, sin, heads, kv_heads);
    at::Tensor key_rows = key_buffer.narrow(0, 0, B);
    at::Tensor value_rows = value_buffer.narrow(0, 0, B);
    write_column(key_buffer, k, end);
    write_column(value_buffer, v, end);
    at::Tensor attn = decode_attention(q.view({B, kv_heads, G, D}), key_rows.narrow(2, start, end + 1 - start),
                                       value_rows.narrow(2, start, end + 1 - start), mask, scale);
    add_rows(hidden, product(attn.view({B, heads * D}), w[2], code[1], width));
    x = rms_norm(hidden, w[3], eps);
    at::Tensor mlp = silu_mul(product(x, w[4], code[2], 2 * intermediate));
    add_rows(hidden, product(mlp, w[5], code[3], width));
  }
  return hidden.view({B, 1, width});
}

}  // namespace envsuite
