// envsuite's native CPU kernels: what the sources share (the vector type and its helpers) and the
// functions one source calls in another. envsuite/engine/kernels/_native.py compiles every
// _native_*.cpp beside this file into one library, for the CPU it runs on (-march=native).
//
//   _native_products.cpp  matrix products for a decode step's skinny inputs (rows_linear, panel_linear,
//                         pack_panels)
//   _native_step.cpp      the decode step's other kernels (rms_norm, rotary_split, silu_mul,
//                         decode_attention)
//   _native_adapters.cpp  a multi-adapter step's per-row LoRA terms at one product site (low_rank_add_)
//   _native_sampling.cpp  next-token choice for a batch of rows (sample_rows, sample_masked_rows)
//   _native_layers.cpp    the whole layer stack in one call (decode_layers; with a multi-adapter step's
//                         terms, decode_layers_adapted), by op
//   _native_team.cpp      the same stack as one team of threads (one parallel region a step)
//   _native_memory.cpp    huge-page arenas for the weights' panels
//   _native_library.cpp   the torch.ops.envsuite schema of every op above
//
// The vector type is GCC's generic vector of 16 floats: one AVX-512 register, two AVX2 ones, four NEON
// or SSE ones; the compiler emits the host's instructions (-march=native), so the same source serves
// every CPU it is built on. Sums over a vector's lanes run as a tree (hsum), so values equal another
// library's up to float rounding, not bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace envsuite {

constexpr int64_t P = 16;  // floats per panel (and per vector)
typedef float vec __attribute__((vector_size(P * sizeof(float))));

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof(vec));
  return v;
}
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof(vec)); }
inline vec splat(float v) { return vec{} + v; }

typedef int32_t ivec __attribute__((vector_size(P * sizeof(int32_t))));

// One vector register of floats: 16 on AVX-512, 8 on AVX/AVX2, 4 on SSE and NEON. Kernels that carry
// accumulators across a loop hold them as rvecs (RV to a panel's 16 floats): GCC 12 keeps a loop-carried
// `vec` wider than the registers in memory, storing and reloading it at every step (on the AMD EPYC
// Zen 3 box, AVX2, every multiply-add of the panel products went through the stack).
#if defined(__AVX512F__)
constexpr int RW = 16;
#elif defined(__AVX__)
constexpr int RW = 8;
#else
constexpr int RW = 4;
#endif
constexpr int RV = P / RW;
typedef float rvec __attribute__((vector_size(RW * sizeof(float))));
inline rvec rload(const float* p) {
  rvec v;
  std::memcpy(&v, p, sizeof(rvec));
  return v;
}
inline void rstore(float* p, rvec v) { std::memcpy(p, &v, sizeof(rvec)); }

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

// The largest of a vector's lanes, as a tree like hsum's.
inline float hmax(vec v) {
  vec w = ENVSUITE_SHUFFLE(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v = w > v ? w : v;
  w = ENVSUITE_SHUFFLE(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v = w > v ? w : v;
  w = ENVSUITE_SHUFFLE(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v = w > v ? w : v;
  w = ENVSUITE_SHUFFLE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  v = w > v ? w : v;
  return v[0];
}

// Work below which at::parallel_for stays on one thread (a parallel region costs a few microseconds).
inline int64_t grain(int64_t flops_per_item) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, flops_per_item)); }

// ------------------------------------------------------------------------------------------ shared pieces

// Items [0, n) shared out among `threads` workers (_native_products.cpp): worker t walks forward
// through its own run of items (the t-th of equal contiguous runs), then takes items one at a time from
// the back of the other runs until none is left. Workers then finish within about one item of each
// other however their speeds drift, and each one's own items stay consecutive, as the weights'
// read-ahead expects. reset() runs while no worker takes; take() from any worker at once.
class StealingRuns {
 public:
  explicit StealingRuns(int64_t threads);
  void reset(int64_t n);
  int64_t take(int64_t thread);  // the next item for `thread`; -1 when every item is taken

 private:
  struct alignas(64) Run {
    std::atomic<uint64_t> bounds;  // front in the low 32 bits, back (exclusive) in the high 32
  };
  static int64_t take_from(Run& run, bool front_end);
  int64_t threads_;
  std::unique_ptr<Run[]> runs_;
};

// One panel product out = x @ W.T (_native_products.cpp) cut into items of one or two panels: item(i)
// computes all M rows' output columns of panels [per_item * i, per_item * (i + 1)) over all of k,
// reading the weights ahead along a walk through consecutive items. Two panels share each load of x
// (the kernel's usual item); one panel halves the work a thread may be left holding at a product's end.
struct PanelProduct {
  PanelProduct(const float* x, const at::Tensor& panels, float* out, int64_t M, int64_t per_item = 2);
  int64_t items() const { return (npanels + per_item - 1) / per_item; }
  // Where `by_k` (13-16 rows, _native_products.cpp): a caller first writes x k-major into a buffer of
  // x_floats() floats (transpose_x) and hands it to every item; else x_t is unused.
  void item(int64_t item, const float* x_t = nullptr) const;
  int64_t x_floats() const { return by_k ? M * K : 0; }
  void transpose_x(float* x_t) const;
  void item_by_k(int64_t item, const float* x_t) const;

  const float* x;
  const float* panels;
  float* out;  // M x ldo, ldo = npanels * 16 (the padding columns are written too)
  int64_t M, K, npanels, ldo, chunk, blocks, per_item;
  int64_t blocks_ahead;  // how many k blocks ahead its items ask for weights (_native_products.cpp)
  bool by_k;             // one pass per panel over all M rows and all K, x read k-major (13-16 rows)
};

// A multi-adapter step's rows by adapter (spans: per row its adapter's first column and width within a
// part's columns; width 0: a base row, no term).
struct AdapterRows {
  struct Group {
    int64_t start, width;
    std::vector<int64_t> rows;
  };
  AdapterRows(const int64_t* spans, int64_t rows);
  // Whether every span lies within a part's R columns (and none is of negative width).
  bool fits(int64_t R) const { return groups.empty() || (least_start >= 0 && least_width > 0 && most_end <= R); }
  std::vector<Group> groups;
  int64_t most = 0;  // the widest adapter's columns
  int64_t least_start = INT64_MAX, least_width = INT64_MAX, most_end = 0;
};

// A site's factors checked (fp32, contiguous and 2-d; a (parts * R, K), b (parts * R, N) with N the
// parts' widths summed; `op` names the caller in the message): their R, a part's columns.
int64_t low_rank_columns(const at::Tensor& a, const at::Tensor& b, at::IntArrayRef part_outputs, const char* op);

// One product site's low-rank terms (_native_adapters.cpp), item by item: first every dot item (low =
// x @ a.T, each row its own adapter's columns), then, after all of them, every axpy item (out += low @ b
// over up to 32 columns of a part). low_rank_add_ shares the items out with at::parallel_for;
// decode_layers' team (_native_team.cpp) shares them itself. a: (parts * R, K), b: (parts * R, N);
// low: rows x (parts * most) floats of the caller's.
class LowRankSite {
 public:
  LowRankSite(const AdapterRows& rows, const float* a, const float* b, int64_t R, int64_t K,
              std::vector<int64_t> part_outputs, float* low);
  int64_t dot_items() const { return (int64_t)dots_.size(); }
  int64_t axpy_items() const { return (int64_t)axpys_.size(); }
  void dot(int64_t item, const float* x) const;  // x: rows of K floats
  std::pair<int64_t, int64_t> axpy(int64_t item, float* out, int64_t ldo) const;  // the columns it added to
  int64_t dot_flops() const;
  int64_t axpy_flops() const;

 private:
  struct DotItem {
    const AdapterRows::Group* group;
    int64_t part, column;
  };
  struct AxpyItem {
    int64_t part, column, count;  // output columns [column, column + count) of part `part`
  };
  const AdapterRows& rows_;
  const float* a_;
  const float* b_;
  int64_t R_, K_, N_ = 0, ldl_ = 0;
  std::vector<int64_t> parts_;
  float* low_;
  std::vector<DotItem> dots_;
  std::vector<AxpyItem> axpys_;
};

// A tensor for weights a decode step streams (_native_memory.cpp): of 64 KB or more, on transparent huge
// pages where the system has them, laid out after the previous such tensor; smaller ones: at::empty.
at::Tensor empty_huge(at::IntArrayRef sizes, const at::TensorOptions& options);

// The decode step's row-level pieces (_native_step.cpp): the ops share out their rows with
// at::parallel_for; decode_layers' team (_native_team.cpp) shares them out itself.
void rms_norm_rows(const float* x, const float* w, float* out, int64_t D, float eps, int64_t begin, int64_t end);
// q (rows, H, D), k and v (rows, KV, D) out of qkv (rows, (H + 2 KV) D), q and k rotated.
void rotary_rows(const float* qkv, const float* cos, const float* sin, float* q, float* k, float* v, int64_t H,
                 int64_t KV, int64_t D, int64_t begin, int64_t end);
// out[i] = SiLU(gate[i]) * up[i] for i in [begin, end) of a row of n.
void silu_mul_span(const float* gate, const float* up, float* out, int64_t begin, int64_t end, int64_t n);

// One-token grouped attention of a batch (decode_attention), item by item: item i is row i / H,
// key/value head i % H, its G query heads. Strides in floats; mask (B, L) or null.
struct DecodeAttention {
  const float* q;  // (B, H, G, D) contiguous
  const float* k;
  const float* v;
  const bool* mask;
  int64_t k_row, k_head, k_pos, v_row, v_head, v_pos;
  int64_t B, H, G, D, L;
  float scale;
  float* out;  // (B, H, G, D) contiguous
  // `item`, asking for item `next`'s keys and values along the way (-1: none); scores: G * L floats.
  void item(int64_t item, int64_t next, float* scores) const;
};
// Whether DecodeAttention takes heads of D floats, G query heads per key/value head.
bool decode_attention_fits(int64_t D, int64_t G);

// ------------------------------------------------------------------------------------------ the ops

at::Tensor rows_linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias);
at::Tensor pack_panels(const at::Tensor& w);
at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, int64_t N,
                        const std::optional<at::Tensor>& bias);
at::Tensor panel_rows(const at::Tensor& panels, const at::Tensor& ids, int64_t N);
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_split(const at::Tensor& qkv, const at::Tensor& cos,
                                                           const at::Tensor& sin, int64_t H, int64_t KV);
at::Tensor silu_mul(const at::Tensor& gate_up);
at::Tensor low_rank_add_(at::Tensor out, const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                         const at::Tensor& spans, at::IntArrayRef part_outputs);
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& mask, double scale);
at::Tensor decode_layers(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                         const std::optional<at::Tensor>& mask, at::TensorList weights, at::IntArrayRef paths,
                         at::TensorList keys, at::TensorList values, int64_t start, int64_t end, int64_t heads,
                         int64_t kv_heads, int64_t intermediate, double eps, double scale,
                         const std::optional<at::Tensor>& final_norm, const std::optional<at::Tensor>& lm_head,
                         int64_t lm_head_path, int64_t vocab);
at::Tensor decode_layers_adapted(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                                 const std::optional<at::Tensor>& mask, at::TensorList weights,
                                 at::IntArrayRef paths, at::TensorList keys, at::TensorList values, int64_t start,
                                 int64_t end, int64_t heads, int64_t kv_heads, int64_t intermediate, double eps,
                                 double scale, const at::Tensor& final_norm, const at::Tensor& lm_head,
                                 int64_t lm_head_path, int64_t vocab, at::TensorList adapter_a,
                                 at::TensorList adapter_b, const at::Tensor& adapter_spans);
std::tuple<at::Tensor, int64_t> decode_layers_clock(bool reset);
bool decode_layers_team(at::TensorList weights, at::IntArrayRef paths, int64_t width, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, int64_t intermediate);
std::tuple<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits, const at::Tensor& temperatures,
                                               const at::Tensor& uniforms);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_masked_rows(const at::Tensor& logits,
                                                                              const at::Tensor& temperatures,
                                                                              const at::Tensor& uniforms,
                                                                              const at::Tensor& bits);

// ------------------------------------------------------------------------------------------ the layer stack

// What decode_layers' two ways share (_native_layers.cpp by op, _native_team.cpp as a team).
// How decode_layers runs each product (envsuite.engine.kernels.ProductPath, by number: see
// envsuite/engine/sampling/_captured_step.py, which passes them). PANELS_BY_OP: envsuite's panels, each
// product as its own op (the step then runs by op, not as a team: a choice the step's calibration
// measures, envsuite/engine/sampling/_step_choice.py).
enum ProductCode : int64_t { F_LINEAR = 0, ONEDNN = 1, ROWS = 2, PANELS = 3, PANELS_BY_OP = 4 };

// The final norm and the LM head, when the caller hands them over: the call then returns the logits.
struct Head {
  at::Tensor norm;    // (hidden_size,)
  at::Tensor weight;  // the LM head in its layout
  int64_t code;       // its ProductCode
  int64_t vocab;      // its output columns
};

// A multi-adapter step's per-row LoRA terms (envsuite/engine/sampling/_adapters.py lays them out): per
// product site, in order (per layer q/k/v, o, gate/up, down; then the LM head), the adapters' factors a
// and b side by side, empty where no adapter touches the site; spans: each row's adapter's columns (the
// width 0 for a base row). Each site's terms are added into its base product before anything reads it.
struct Terms {
  at::TensorList a, b;
  at::Tensor spans;

  void add(at::Tensor& out, const at::Tensor& x, size_t site, at::IntArrayRef part_outputs) const {
    if (a[site].numel() > 0) low_rank_add_(out, x, a[site], b[site], spans, part_outputs);
  }
};

// Rows [0, B) x columns [c0, c1) of dst (row stride ldd) += src (row stride lds).
void add_columns(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t B, int64_t c0, int64_t c1);
// The new position's heads of rows [begin, end) into a cache buffer's column (_native_layers.cpp).
void write_rows(float* column, int64_t row, int64_t head, const float* heads, int64_t KV, int64_t D, int64_t begin,
                int64_t end);
// The logits (B, vocab) of the residual stream after the last layer (B, width), op by op.
at::Tensor head_by_op(const at::Tensor& hidden, const Head& head, double eps, const Terms* terms);
// The stack as one team of threads (decode_layers_team said it fits).
at::Tensor layers_as_team(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                          const std::optional<at::Tensor>& mask, at::TensorList weights, at::TensorList keys,
                          at::TensorList values, int64_t start, int64_t end, int64_t heads, int64_t kv_heads,
                          int64_t intermediate, double eps, double scale, const std::optional<Head>& head,
                          const Terms* terms);

}  // namespace envsuite
