// decode_layers: every decoder layer of a Llama decode step in one call (the step captured: no Python
// between its ~700 operations), run one of two ways with the same values:
//   by op     each kernel as its own op (rms_norm, the products on their calibrated paths, rotary_split,
//             decode_attention, silu_mul), each sharing out its work with at::parallel_for;
//   as a team where every product runs envsuite's panels (the calibrated path on most CPUs): one
//             parallel region for the whole step (_native_team.cpp).
// Both run the same row-level functions (_native.h) on the same values in the same order per element,
// so they give the same values (tested against the step-by-step Python, which runs the ops).
// decode_layers_adapted runs the same stack with a multi-adapter step's per-row LoRA terms added into
// each product (either way; tests/test_multi_adapter_sampling.py holds it to the Python's mixed step).
// Measured on the AMD EPYC box (bench/decode_team.py: SmolLM2-135M's decode step, the team against by
// op, 6 alternating rounds in one process), median step time ratio: 0.963 at 1 row, 0.952 at 2, 0.947
// at 4, 0.952 at 8, 0.967 at 16, 0.964 at 32, 0.972 at 64.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "_native.h"

namespace envsuite {

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

// Rows [0, B) x columns [c0, c1) of dst (row stride ldd) += src (row stride lds): a residual add without
// a dispatch (one rounding per element, as torch's add_). By op: a whole product at once; in the team:
// a product's item, by the thread that computed it.
void add_columns(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t B, int64_t c0, int64_t c1) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = c0; c < c1; ++c) dst[b * ldd + c] += src[b * lds + c];
}

// dst (B, width) += src, contiguous.
void add_rows(at::Tensor& dst, const at::Tensor& src_in) {
  const at::Tensor src = src_in.contiguous();
  TORCH_CHECK(src.numel() == dst.numel(), "decode_layers: a product of the wrong width");
  const int64_t n = dst.numel();
  add_columns(dst.mutable_data_ptr<float>(), n, src.const_data_ptr<float>(), n, 1, 0, n);
}

// The new position's heads of rows [begin, end) (heads: (B, KV, D) contiguous) into a cache buffer's
// column: `column` points at row 0, head 0 of it; rows and heads `row` and `head` floats apart.
void write_rows(float* column, int64_t row, int64_t head, const float* heads, int64_t KV, int64_t D, int64_t begin,
                int64_t end) {
  for (int64_t b = begin; b < end; ++b)
    for (int64_t h = 0; h < KV; ++h) std::memcpy(column + b * row + h * head, heads + (b * KV + h) * D, D * sizeof(float));
}

// The new position's heads (B, KV, 1, D), contiguous, into column `column` of rows [0, B) of a cache
// buffer (rows, KV, columns, D) with unit stride in D, without a dispatch.
void write_column(const at::Tensor& buffer, const at::Tensor& heads, int64_t column) {
  write_rows(buffer.mutable_data_ptr<float>() + column * buffer.stride(2), buffer.stride(0), buffer.stride(1),
             heads.const_data_ptr<float>(), heads.size(1), heads.size(3), 0, heads.size(0));
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
    case PANELS_BY_OP:
      return panel_linear(x, w, N, std::nullopt);
    default:
      TORCH_CHECK(false, "decode_layers: unknown product code ", code);
  }
}

// ------------------------------------------------------------------------------------------ by op

at::Tensor layers_by_op(const at::Tensor& hidden_in, const at::Tensor& cos, const at::Tensor& sin,
                         const std::optional<at::Tensor>& mask, at::TensorList weights, at::IntArrayRef paths,
                         at::TensorList keys, at::TensorList values, int64_t start, int64_t end, int64_t heads,
                         int64_t kv_heads, int64_t intermediate, double eps, double scale, const Terms* terms) {
  const int64_t layers = (int64_t)keys.size();
  const int64_t B = hidden_in.size(0), width = hidden_in.size(-1);
  at::Tensor hidden = hidden_in.reshape({B, width}).clone();  // the residual stream, updated in place
  const int64_t G = heads / kv_heads, I = intermediate;
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor* w = weights.data() + 6 * l;
    const int64_t* code = paths.data() + 4 * l;
    const at::Tensor& key_buffer = keys[l];
    const at::Tensor& value_buffer = values[l];
    const int64_t D = key_buffer.size(3);
    at::Tensor x = rms_norm(hidden, w[0], eps);
    at::Tensor qkv = product(x, w[1], code[0], (heads + 2 * kv_heads) * D);
    if (terms != nullptr) terms->add(qkv, x, 4 * l, {heads * D, kv_heads * D, kv_heads * D});
    auto [q, k, v] = rotary_split(qkv, cos, sin, heads, kv_heads);
    at::Tensor key_rows = key_buffer.narrow(0, 0, B);
    at::Tensor value_rows = value_buffer.narrow(0, 0, B);
    write_column(key_buffer, k, end);
    write_column(value_buffer, v, end);
    at::Tensor attn = decode_attention(q.view({B, kv_heads, G, D}), key_rows.narrow(2, start, end + 1 - start),
                                       value_rows.narrow(2, start, end + 1 - start), mask, scale)
                          .view({B, heads * D});
    at::Tensor o = product(attn, w[2], code[1], width);
    if (terms != nullptr) terms->add(o, attn, 4 * l + 1, {width});
    add_rows(hidden, o);
    x = rms_norm(hidden, w[3], eps);
    at::Tensor gate_up = product(x, w[4], code[2], 2 * I);
    if (terms != nullptr) terms->add(gate_up, x, 4 * l + 2, {I, I});
    at::Tensor mlp = silu_mul(gate_up);
    at::Tensor down = product(mlp, w[5], code[3], width);
    if (terms != nullptr) terms->add(down, mlp, 4 * l + 3, {width});
    add_rows(hidden, down);
  }
  return hidden.view({B, 1, width});
}

// The logits (B, vocab) of the residual stream after the last layer (B, width), op by op.
at::Tensor head_by_op(const at::Tensor& hidden, const Head& head, double eps, const Terms* terms) {
  const int64_t B = hidden.size(0);
  const at::Tensor x = rms_norm(hidden.reshape({B, -1}), head.norm, eps);
  at::Tensor logits = product(x, head.weight, head.code, head.vocab).reshape({B, head.vocab});
  if (terms != nullptr) terms->add(logits, x, terms->a.size() - 1, {head.vocab});
  return logits;
}

namespace {

// decode_layers' body, with a multi-adapter step's `terms` or without (null).
at::Tensor decode_stack(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                        const std::optional<at::Tensor>& mask, at::TensorList weights, at::IntArrayRef paths,
                        at::TensorList keys, at::TensorList values, int64_t start, int64_t end, int64_t heads,
                        int64_t kv_heads, int64_t intermediate, double eps, double scale,
                        const std::optional<Head>& head, const Terms* terms) {
  const int64_t layers = (int64_t)keys.size();
  TORCH_CHECK(layers > 0 && (int64_t)values.size() == layers && (int64_t)weights.size() == 6 * layers &&
                  (int64_t)paths.size() == 4 * layers,
              "decode_layers: per layer 6 weights, 4 paths, one key and one value buffer");
  TORCH_CHECK(hidden.scalar_type() == at::kFloat && hidden.device().is_cpu(), "decode_layers: fp32 CPU");
  const int64_t B = hidden.size(0), width = hidden.size(-1);
  TORCH_CHECK(hidden.numel() == B * width, "decode_layers: one token per row");
  const int64_t D = keys[0].size(3);
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor& k = keys[l];
    const at::Tensor& v = values[l];
    TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1 && k.size(0) >= B && v.size(0) >= B && end < k.size(2) &&
                    end < v.size(2) && start <= end && k.size(3) == D && v.size(3) == D,
                "decode_layers: layer ", l, "'s cache has no free column ", end, " for ", B, " rows");
  }
  if (terms != nullptr)
    TORCH_CHECK(head.has_value() && (int64_t)terms->a.size() == 4 * layers + 1 && terms->b.size() == terms->a.size() &&
                    terms->spans.numel() == 2 * B,
                "decode_layers_adapted: per layer 4 sites' factors and the LM head's, a span per row");
  if (decode_layers_team(weights, paths, width, heads, kv_heads, D, intermediate))
    return layers_as_team(hidden, cos, sin, mask, weights, keys, values, start, end, heads, kv_heads, intermediate,
                          eps, scale, head, terms);
  at::Tensor out = layers_by_op(hidden, cos, sin, mask, weights, paths, keys, values, start, end, heads, kv_heads,
                                intermediate, eps, scale, terms);
  return head.has_value() ? head_by_op(out, *head, eps, terms) : out;
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
//   final_norm, lm_head (its layout), lm_head_path (its ProductCode), vocab: the final RMS norm and the LM
//   head, or None: with them the call returns the logits (B, vocab), else the residual stream after the
//   last layer (B, 1, hidden_size). The caller advances the cache.
at::Tensor decode_layers(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                         const std::optional<at::Tensor>& mask, at::TensorList weights, at::IntArrayRef paths,
                         at::TensorList keys, at::TensorList values, int64_t start, int64_t end, int64_t heads,
                         int64_t kv_heads, int64_t intermediate, double eps, double scale,
                         const std::optional<at::Tensor>& final_norm, const std::optional<at::Tensor>& lm_head,
                         int64_t lm_head_path, int64_t vocab) {
  std::optional<Head> head;
  if (lm_head.has_value() && lm_head->defined()) {
    TORCH_CHECK(final_norm.has_value() && final_norm->defined() && vocab > 0,
                "decode_layers: an LM head needs the final norm and its vocabulary size");
    head = Head{*final_norm, *lm_head, lm_head_path, vocab};
  }
  return decode_stack(hidden, cos, sin, mask, weights, paths, keys, values, start, end, heads, kv_heads, intermediate,
                      eps, scale, head, nullptr);
}

// decode_layers with a multi-adapter step's per-row LoRA terms (struct Terms: adapter_a and adapter_b per
// layer 4 sites, then the LM head's, empty tensors where no adapter touches a site; adapter_spans each
// row's adapter's columns): each product's terms added into it before anything reads it, as the
// multi-adapter step's Python (envsuite/engine/sampling/_adapters.py) adds them. By op: each product
// followed by its site's low_rank_add_; as a team: a site's dots shared out with its product's items,
// then, after a barrier, its axpys (and the residual add). Returns the logits.
at::Tensor decode_layers_adapted(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                                 const std::optional<at::Tensor>& mask, at::TensorList weights,
                                 at::IntArrayRef paths, at::TensorList keys, at::TensorList values, int64_t start,
                                 int64_t end, int64_t heads, int64_t kv_heads, int64_t intermediate, double eps,
                                 double scale, const at::Tensor& final_norm, const at::Tensor& lm_head,
                                 int64_t lm_head_path, int64_t vocab, at::TensorList adapter_a,
                                 at::TensorList adapter_b, const at::Tensor& adapter_spans) {
  TORCH_CHECK(vocab > 0, "decode_layers_adapted: the LM head's vocabulary size");
  const Terms terms{adapter_a, adapter_b, adapter_spans.to(at::kLong).contiguous()};
  return decode_stack(hidden, cos, sin, mask, weights, paths, keys, values, start, end, heads, kv_heads, intermediate,
                      eps, scale, Head{final_norm, lm_head, lm_head_path, vocab}, &terms);
}

}  // namespace envsuite
