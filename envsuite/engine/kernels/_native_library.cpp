// The torch.ops.envsuite schema of every native kernel (_native.h lists the sources that define them).
#include <torch/library.h>

#include "_native.h"

TORCH_LIBRARY(envsuite, m) {
  m.def("rows_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("pack_panels(Tensor weight) -> Tensor");
  m.def("panel_linear(Tensor x, Tensor panels, int out_features, Tensor? bias) -> Tensor");
  m.def("panel_rows(Tensor panels, Tensor ids, int rows) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale) -> Tensor");
  m.def("rotary_split(Tensor qkv, Tensor cos, Tensor sin, int heads, int kv_heads) -> (Tensor, Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("low_rank_add_(Tensor(a!) out, Tensor x, Tensor a, Tensor b, Tensor spans, int[] part_outputs) -> Tensor(a!)");
  m.def(
      "decode_layers(Tensor hidden, Tensor cos, Tensor sin, Tensor? mask, Tensor[] weights, int[] paths, "
      "Tensor[] keys, Tensor[] values, int start, int end, int heads, int kv_heads, int intermediate, float eps, "
      "float scale, Tensor? final_norm=None, Tensor? lm_head=None, int lm_head_path=3, int vocab=0) -> Tensor");
  m.def(
      "decode_layers_adapted(Tensor hidden, Tensor cos, Tensor sin, Tensor? mask, Tensor[] weights, int[] paths, "
      "Tensor[] keys, Tensor[] values, int start, int end, int heads, int kv_heads, int intermediate, float eps, "
      "float scale, Tensor final_norm, Tensor lm_head, int lm_head_path, int vocab, Tensor[] adapter_a, "
      "Tensor[] adapter_b, Tensor adapter_spans) -> Tensor");
  m.def(
      "decode_layers_team(Tensor[] weights, int[] paths, int width, int heads, int kv_heads, int head_dim, "
      "int intermediate) -> bool");
  // no tensor argument to dispatch on: one kernel for every key
  m.def("decode_layers_clock(bool reset=True) -> (Tensor, int)", &envsuite::decode_layers_clock);
  m.def("sample_rows(Tensor logits, Tensor temperatures, Tensor uniforms) -> (Tensor, Tensor)");
  m.def(
      "sample_masked_rows(Tensor logits, Tensor temperatures, Tensor uniforms, Tensor bits) -> "
      "(Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(envsuite, CPU, m) {
  m.impl("rows_linear", &envsuite::rows_linear);
  m.impl("pack_panels", &envsuite::pack_panels);
  m.impl("panel_linear", &envsuite::panel_linear);
  m.impl("panel_rows", &envsuite::panel_rows);
  m.impl("rms_norm", &envsuite::rms_norm);
  m.impl("decode_attention", &envsuite::decode_attention);
  m.impl("rotary_split", &envsuite::rotary_split);
  m.impl("silu_mul", &envsuite::silu_mul);
  m.impl("low_rank_add_", &envsuite::low_rank_add_);
  m.impl("decode_layers", &envsuite::decode_layers);
  m.impl("decode_layers_adapted", &envsuite::decode_layers_adapted);
  m.impl("sample_rows", &envsuite::sample_rows);
  m.impl("sample_masked_rows", &envsuite::sample_masked_rows);
  m.impl("decode_layers_team", &envsuite::decode_layers_team);
}

// A stack whose products hold oneDNN's reordered (opaque mkldnn) weights dispatches on that key.
TORCH_LIBRARY_IMPL(envsuite, MkldnnCPU, m) {
  m.impl("decode_layers", &envsuite::decode_layers);
  m.impl("decode_layers_adapted", &envsuite::decode_layers_adapted);
  m.impl("decode_layers_team", &envsuite::decode_layers_team);
}
