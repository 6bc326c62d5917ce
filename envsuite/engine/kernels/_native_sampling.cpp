// Next-token choice for a batch of rows in one call: what envsuite.engine.sampling.choose_tokens computes
// with torch's operations for a row without top-k, top-p or top logprobs (_token_choice.py), in two
// passes over each row's logits that allocate nothing. torch's way runs ~12 operations over
// (rows, vocabulary) tensors; right after the LM head that was 0.46 ms a step at one row and 1.5-1.7 ms
// at 32 rows on the AMD EPYC box (freshly allocated tensors, a parallel region per operation).
//
//   sample_rows(logits (R, V) fp32, temperatures (R) fp32, uniforms (R) fp32) -> (tokens (R) int64,
//                                                                                  logprobs (R) fp32)
// Per row, with T its temperature (T <= 0: greedy, scored at T = 1 as the model's own logprob):
//   s = logits * (1 / T), M = max s, w_v = e^(s_v - M), total = sum of w (block by block);
//   a sampled row takes the first v whose running sum of w reaches u * total (inverse CDF; u in (0, 1]
//   from the row's own generator, drawn by the caller), a greedy row the first v with s_v = M;
//   logprob = s_token - M - log(total).
// The same distribution as torch's way; a token can differ only where u * total falls within float
// rounding of a boundary between two tokens.
//
//   sample_masked_rows(logits (R, V) fp32, temperatures (R), uniforms (R), bits (R, ceil(V / 32)) int32)
//     -> (tokens (R) int64, logprobs (R) fp32, constrained (R) fp32, fallback (R) bool)
// The same choice among each row's allowed tokens (bit j of word w allows token 32 w + j: llguidance's
// mask), in the same passes: M is the max of the whole scaled row, each weight e^(s_v - M) is summed into
// the row's total and, where allowed, into the allowed total; the draw scans allowed weights only.
// logprobs: s_token - M - log(total), the model's own (unmasked); constrained: s_token - M -
// log(allowed total), under the mask the token was drawn from. Where every allowed token lies more than
// 60 below M, their weights could reach the exponential's floor: the row is flagged fallback (the
// caller draws it another way) rather than drawn from rounded-off weights. A block's weights come from one function (block_weights)
// when its sum is taken and when it is scanned, so they are the same numbers both times; a row's tail
// past the last whole vector takes vexp too, so every token's weight is the same function of its logit.
#include <ATen/Parallel.h>

#include <limits>
#include <vector>

#include "_native.h"

namespace envsuite {
namespace {

constexpr int64_t BLOCK = 256;  // vocabulary block: its weights stay in L1 between the sum and the scan

// e^(x * inv - top) for x[0, n), n <= BLOCK, into w; returns their sum.
inline float block_weights(const float* x, int64_t n, float inv, float top, float* w) {
  const int64_t nv = n - n % P;
  vec acc = {};
  for (int64_t i = 0; i < nv; i += P) {
    const vec e = vexp(load(x + i) * inv - top);
    store(w + i, e);
    acc += e;
  }
  float sum = hsum(acc);
  for (int64_t i = nv; i < n; ++i) {
    w[i] = vexp(splat(x[i] * inv - top))[0];
    sum += w[i];
  }
  return sum;
}

inline float row_max(const float* x, int64_t V) {
  const int64_t vv = V - V % P;
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  vec top = splat(minus_inf);
  for (int64_t i = 0; i < vv; i += P) {
    const vec v = load(x + i);
    top = v > top ? v : top;
  }
  float m = hmax(top);
  for (int64_t i = vv; i < V; ++i) m = std::max(m, x[i]);
  return m;
}

struct Choice {
  int64_t token;
  float logprob;
};

// One row (the file's comment). `sums` holds a block sum per vocabulary block.
Choice choose_row(const float* x, int64_t V, float temperature, float uniform, float* sums) {
  const bool greedy = temperature <= 0.f;
  const float inv = greedy ? 1.f : 1.f / temperature;
  const float top = row_max(x, V) * inv;  // inv > 0: the max of the scaled row
  float w[BLOCK];
  double total = 0.0;
  const int64_t blocks = (V + BLOCK - 1) / BLOCK;
  for (int64_t b = 0; b < blocks; ++b) {
    sums[b] = block_weights(x + b * BLOCK, std::min(BLOCK, V - b * BLOCK), inv, top, w);
    total += sums[b];
  }
  const float log_norm = top + (float)std::log(total);
  int64_t token = 0;
  if (greedy) {
    while (token < V - 1 && x[token] * inv != top) ++token;
    return {token, x[token] * inv - log_norm};
  }
  const double target = (double)uniform * total;
  double before = 0.0;
  int64_t b = 0;
  while (b < blocks - 1 && before + sums[b] < target) before += sums[b++];
  const int64_t n = std::min(BLOCK, V - b * BLOCK);
  block_weights(x + b * BLOCK, n, inv, top, w);
  // The block's running sum may stop short of its vectorized sum by rounding: then the target lies past
  // its last token with weight, which takes it.
  int64_t pick = -1;
  double running = before;
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] <= 0.f) continue;
    pick = i;
    running += w[i];
    if (running >= target) break;
  }
  token = b * BLOCK + std::max<int64_t>(pick, 0);
  return {token, x[token] * inv - log_norm};
}

// The 8 weights' multipliers (1 allowed, 0 not) of each byte of mask bits.
struct ByteMasks {
  float table[256][8];
  ByteMasks() {
    for (int b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j) table[b][j] = (b >> j & 1) ? 1.f : 0.f;
  }
};
const ByteMasks BYTE_MASKS;

inline bool allowed(const uint8_t* bits, int64_t v) { return bits[v >> 3] >> (v & 7) & 1; }

// The allowed part of block weights w[0, n) starting at token `first` (a multiple of 8), summed.
inline float allowed_sum(const float* w, int64_t n, const uint8_t* bits, int64_t first) {
  const int64_t nv = n - n % P;
  vec acc = {};
  for (int64_t i = 0; i < nv; i += P) {
    float m[P];
    for (int64_t k = 0; k < P; k += 8) std::memcpy(m + k, BYTE_MASKS.table[bits[(first + i + k) >> 3]], 32);
    acc += load(w + i) * load(m);
  }
  float sum = hsum(acc);
  for (int64_t i = nv; i < n; ++i) sum += allowed(bits, first + i) ? w[i] : 0.f;
  return sum;
}

constexpr double ALLOWED_FLOOR = 8.75651e-27;  // e^-60: below it the allowed weights may be rounded off

struct MaskedChoice {
  int64_t token;
  float logprob;
  float constrained;
  bool fallback;
};

MaskedChoice choose_masked_row(const float* x, int64_t V, float temperature, float uniform, const uint8_t* bits,
                               float* sums) {
  const bool greedy = temperature <= 0.f;
  const float inv = greedy ? 1.f : 1.f / temperature;
  const float top = row_max(x, V) * inv;
  float w[BLOCK];
  double total = 0.0, total_allowed = 0.0;
  const int64_t blocks = (V + BLOCK - 1) / BLOCK;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n = std::min(BLOCK, V - b * BLOCK);
    total += block_weights(x + b * BLOCK, n, inv, top, w);
    sums[b] = allowed_sum(w, n, bits, b * BLOCK);
    total_allowed += sums[b];
  }
  if (total_allowed < ALLOWED_FLOOR) return {0, 0.f, 0.f, true};
  const float log_norm = top + (float)std::log(total), log_allowed = top + (float)std::log(total_allowed);
  int64_t token = -1;
  if (greedy) {  // the first allowed token with the largest logit
    for (int64_t v = 0; v < V; ++v)
      if (allowed(bits, v) && (token < 0 || x[v] > x[token])) token = v;
  } else {
    const double target = (double)uniform * total_allowed;
    double before = 0.0;
    int64_t b = 0;
    while (b < blocks - 1 && before + sums[b] < target) before += sums[b++];
    const int64_t n = std::min(BLOCK, V - b * BLOCK);
    block_weights(x + b * BLOCK, n, inv, top, w);
    double running = before;
    for (int64_t i = 0; i < n; ++i) {  // as in choose_row: rounding may leave the target past the last
      if (w[i] <= 0.f || !allowed(bits, b * BLOCK + i)) continue;
      token = b * BLOCK + i;
      running += w[i];
      if (running >= target) break;
    }
    if (token < 0) return {0, 0.f, 0.f, true};  // the block's allowed weights rounded to nothing
  }
  const float s = x[token] * inv;
  return {token, s - log_norm, s - log_allowed, false};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_masked_rows(const at::Tensor& logits_in,
                                                                              const at::Tensor& temperatures,
                                                                              const at::Tensor& uniforms,
                                                                              const at::Tensor& bits_in) {
  TORCH_CHECK(logits_in.dim() == 2 && logits_in.device().is_cpu() && logits_in.scalar_type() == at::kFloat,
              "sample_masked_rows: logits (rows, vocabulary), fp32 on the CPU");
  const at::Tensor logits = logits_in.contiguous(), bits = bits_in.contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(V > 0, "sample_masked_rows: an empty vocabulary");
  TORCH_CHECK(bits.dim() == 2 && bits.size(0) == R && bits.size(1) * 32 >= V && bits.scalar_type() == at::kInt,
              "sample_masked_rows: bits (rows, words) int32 covering the vocabulary");
  const at::Tensor t = temperatures.to(at::kFloat).contiguous(), u = uniforms.to(at::kFloat).contiguous();
  TORCH_CHECK(t.numel() == R && u.numel() == R, "sample_masked_rows: one temperature and one uniform per row");
  at::Tensor tokens = at::empty({R}, logits.options().dtype(at::kLong));
  at::Tensor logprobs = at::empty({R}, logits.options()), constrained = at::empty({R}, logits.options());
  at::Tensor fallback = at::empty({R}, logits.options().dtype(at::kBool));
  const float* xp = logits.const_data_ptr<float>();
  const uint8_t* bp = reinterpret_cast<const uint8_t*>(bits.const_data_ptr<int32_t>());  // little-endian words
  const int64_t row_bytes = bits.size(1) * 4;
  const float* tp = t.const_data_ptr<float>();
  const float* up = u.const_data_ptr<float>();
  int64_t* token_p = tokens.mutable_data_ptr<int64_t>();
  float* logprob_p = logprobs.mutable_data_ptr<float>();
  float* constrained_p = constrained.mutable_data_ptr<float>();
  bool* fallback_p = fallback.mutable_data_ptr<bool>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sums((V + BLOCK - 1) / BLOCK);
    for (int64_t r = begin; r < end; ++r) {
      const MaskedChoice c = choose_masked_row(xp + r * V, V, tp[r], up[r], bp + r * row_bytes, sums.data());
      token_p[r] = c.token;
      logprob_p[r] = c.logprob;
      constrained_p[r] = c.constrained;
      fallback_p[r] = c.fallback;
    }
  });
  return {tokens, logprobs, constrained, fallback};
}

std::tuple<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits_in, const at::Tensor& temperatures,
                                               const at::Tensor& uniforms) {
  TORCH_CHECK(logits_in.dim() == 2 && logits_in.device().is_cpu() && logits_in.scalar_type() == at::kFloat,
              "sample_rows: logits (rows, vocabulary), fp32 on the CPU");
  const at::Tensor logits = logits_in.contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(V > 0, "sample_rows: an empty vocabulary");
  const at::Tensor t = temperatures.to(at::kFloat).contiguous(), u = uniforms.to(at::kFloat).contiguous();
  TORCH_CHECK(t.numel() == R && u.numel() == R, "sample_rows: one temperature and one uniform per row");
  at::Tensor tokens = at::empty({R}, logits.options().dtype(at::kLong));
  at::Tensor logprobs = at::empty({R}, logits.options());
  const float* xp = logits.const_data_ptr<float>();
  const float* tp = t.const_data_ptr<float>();
  const float* up = u.const_data_ptr<float>();
  int64_t* token_p = tokens.mutable_data_ptr<int64_t>();
  float* logprob_p = logprobs.mutable_data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sums((V + BLOCK - 1) / BLOCK);
    for (int64_t r = begin; r < end; ++r) {
      const Choice choice = choose_row(xp + r * V, V, tp[r], up[r], sums.data());
      token_p[r] = choice.token;
      logprob_p[r] = choice.logprob;
    }
  });
  return {tokens, logprobs};
}

}  // namespace envsuite
