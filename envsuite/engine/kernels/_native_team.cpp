// decode_layers as a team (_native_layers.cpp runs the stack by op and calls this where every product
// runs envsuite's panels): one parallel region for the whole step. Its threads share out each phase of
// a layer (the norms' rows, a product's panels, the attention's (row, head) items, SiLU's spans) and
// meet at a spin barrier between phases: no fork and join per op (~150 a step), no allocation per op
// (the buffers between phases are allocated once per call), and the residual adds done by the thread
// that computed those columns. With a multi-adapter step's terms, a product's phase also computes its
// site's x @ a.T and, after one more barrier, the threads add low @ b (and the residual) into its
// columns. The same row-level functions as by op, in the same order per element: the same values.
#include <ATen/Parallel.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "_native.h"

namespace envsuite {
namespace {

// A barrier for the threads of one parallel region: the last to arrive starts the next phase; the
// others spin on it (a phase is microseconds long: a sleeping wait would cost more than the phase),
// yielding the core after a while in case the thread they wait for shares it (more threads than free
// cores: another process busy, or torch set to more threads than cores).
class SpinBarrier {
 public:
  explicit SpinBarrier(int64_t threads) : threads_(threads) {}
  void resize(int64_t threads) { threads_ = threads; }  // before anyone arrives
  void arrive_and_wait() {
    const int64_t phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
      return;
    }
    for (int64_t spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
      if (spins < SPINS) {
        relax();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static constexpr int64_t SPINS = 4096;  // ~100 us of pause instructions on the AMD EPYC box
  int64_t threads_;
  alignas(64) std::atomic<int64_t> arrived_{0};
  alignas(64) std::atomic<int64_t> phase_{0};
};

// The phases of the team's step, in order (envsuite.engine.kernels.TEAM_PHASES names them).
enum Phase : int64_t { INPUT_NORM, QKV, ROTARY, ATTENTION, O, POST_NORM, GATE_UP, SILU, DOWN, FINAL_NORM, LM_HEAD, PHASES };

// Where the team's time goes (ENVSUITE_DECODE_TEAM_CLOCK=1; else no clock is read): per thread and phase,
// the time working in it and the time waiting at the barrier that ends it, summed over the calls since
// the last decode_layers_clock(reset=True). Which phase to speed up, and how evenly a change shares out
// the work, measured on the real step.
struct Clock {
  std::mutex mutex;
  std::vector<int64_t> ns;  // (threads, PHASES, 2): working, waiting
  int64_t calls = 0;
};
Clock& clock_registry() {
  static Clock registry;
  return registry;
}
struct alignas(64) ThreadClock {  // one thread's, on cache lines of its own
  int64_t working[PHASES] = {};
  int64_t waiting[PHASES] = {};
  std::chrono::steady_clock::time_point last;
};

inline int64_t ns_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// [n * t / threads, n * (t + 1) / threads): thread t's share of n items.
struct Share {
  int64_t begin, end;
  Share(int64_t n, int64_t t, int64_t threads) : begin(n * t / threads), end(n * (t + 1) / threads) {}
};

// One layer's norm weights and cache buffers, read before the threads start (nothing in the parallel
// region may throw).
struct LayerView {
  const float* input_norm;
  const float* post_norm;
  float* keys;  // column 0 of row 0
  float* values;
  int64_t k_row, k_head, k_pos, v_row, v_head, v_pos;
};

// Everything the team's threads share: the step's sizes, its weights and caches, the buffers between
// phases, each product's work-stealing runs, the barrier.
struct TeamStep {
  int64_t B, width, heads, kv_heads, G, D, I, layers, start, end, L;
  float eps, scale;
  const float* cos;
  const float* sin;
  const bool* mask;
  std::vector<LayerView> views;
  float* hidden;  // (B, width), the residual stream
  float *x, *qkv, *q, *k, *v, *attn, *narrow_out, *gate_up, *mlp;
  int64_t gate_up_ld;
  std::vector<PanelProduct> products;  // per layer: qkv, o, gate/up, down; then the LM head's if any
  std::vector<StealingRuns> runs;      // one per product
  const float* final_norm;             // with the LM head's product (else null)
  SpinBarrier barrier;
  int64_t threads;
  std::vector<ThreadClock> clocks;  // per thread, when timed (else empty)
  int64_t x_floats = 0;             // the largest k-major copy of x a product needs (13-16 rows)
  // Per product, a multi-adapter step's terms at its site (null: no adapter there); empty: a step without.
  std::vector<const LowRankSite*> sites;

  // Thread t ends `phase`: it meets the others at the barrier (its time in the phase and at the
  // barrier counted when timed).
  void meet(int64_t t, Phase phase) {
    if (clocks.empty()) {
      barrier.arrive_and_wait();
      return;
    }
    ThreadClock& clock = clocks[t];
    const auto arrived = std::chrono::steady_clock::now();
    barrier.arrive_and_wait();
    const auto left = std::chrono::steady_clock::now();
    clock.working[phase] += ns_between(clock.last, arrived);
    clock.waiting[phase] += ns_between(arrived, left);
    clock.last = left;
  }

  // Thread t's share of product i, each item's columns added to the residual stream if `residual`.
  // With a multi-adapter site's terms: its share of their dots too (x @ a.T: x is complete, their
  // buffer is the product's), then, after a barrier (in `phase`), its share of their axpys into the
  // product's columns, the residual added after them.
  void product(int64_t i, int64_t t, bool residual, std::vector<float>& x_t, Phase phase) {
    const PanelProduct& p = products[i];
    const LowRankSite* site = sites.empty() ? nullptr : sites[i];
    const int64_t columns = P * p.per_item;
    if (site != nullptr) {
      const Share dots(site->dot_items(), t, threads);
      for (int64_t item = dots.begin; item < dots.end; ++item) site->dot(item, p.x);
    }
    // Each thread its own k-major copy of x (13-16 rows), so no barrier between: as scalar copies
    // they cost ~0.3 ms of SmolLM2's 16-row step (it took 1.017x with every copy made twice), less
    // through registers (_native_products.cpp's transpose_rows).
    if (p.by_k) p.transpose_x(x_t.data());
    for (int64_t item = runs[i].take(t); item >= 0; item = runs[i].take(t)) {
      p.item(item, x_t.data());
      if (residual && site == nullptr)
        add_columns(hidden, width, p.out, p.ldo, B, columns * item, std::min(width, columns * (item + 1)));
    }
    if (site == nullptr) return;
    meet(t, phase);
    const Share axpys(site->axpy_items(), t, threads);
    for (int64_t item = axpys.begin; item < axpys.end; ++item) {
      const auto [c0, c1] = site->axpy(item, p.out, p.ldo);
      if (residual) add_columns(hidden, width, p.out, p.ldo, B, c0, c1);
    }
  }

  void layer(int64_t l, int64_t t, std::vector<float>& scores, std::vector<float>& x_t) {
    const LayerView& view = views[l];
    const Share rows(B, t, threads);
    rms_norm_rows(hidden, view.input_norm, x, width, eps, rows.begin, rows.end);
    meet(t, INPUT_NORM);
    product(4 * l, t, false, x_t, QKV);
    meet(t, QKV);
    rotary_rows(qkv, cos, sin, q, k, v, heads, kv_heads, D, rows.begin, rows.end);
    // the new position's keys and values into the cache's column `end`
    write_rows(view.keys + end * view.k_pos, view.k_row, view.k_head, k, kv_heads, D, rows.begin, rows.end);
    write_rows(view.values + end * view.v_pos, view.v_row, view.v_head, v, kv_heads, D, rows.begin, rows.end);
    meet(t, ROTARY);
    const DecodeAttention attention{q,     view.keys + start * view.k_pos, view.values + start * view.v_pos,
                                    mask,  view.k_row,  view.k_head, view.k_pos, view.v_row, view.v_head,
                                    view.v_pos, B, kv_heads, G, D, L, scale, attn};
    const Share items(B * kv_heads, t, threads);
    for (int64_t item = items.begin; item < items.end; ++item)
      attention.item(item, item + 1 < items.end ? item + 1 : -1, scores.data());
    meet(t, ATTENTION);
    product(4 * l + 1, t, true, x_t, O);
    meet(t, O);
    rms_norm_rows(hidden, view.post_norm, x, width, eps, rows.begin, rows.end);
    meet(t, POST_NORM);
    product(4 * l + 2, t, false, x_t, GATE_UP);
    meet(t, GATE_UP);
    // SiLU(gate) * up in spans of 256 of each row's I values
    constexpr int64_t SPAN = 256;
    const int64_t spans = (I + SPAN - 1) / SPAN;
    const Share pieces(B * spans, t, threads);
    for (int64_t piece = pieces.begin; piece < pieces.end; ++piece) {
      const int64_t b = piece / spans, i0 = piece % spans * SPAN;
      const float* g = gate_up + b * gate_up_ld;
      silu_mul_span(g, g + I, mlp + b * I, i0, std::min(I, i0 + SPAN), I);
    }
    meet(t, SILU);
    product(4 * l + 3, t, true, x_t, DOWN);
    meet(t, DOWN);
  }

  void run(int64_t t) {
    std::vector<float> scores(G * L);
    std::vector<float> x_t(x_floats);
    if (!clocks.empty()) clocks[t].last = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l) layer(l, t, scores, x_t);
    if (final_norm != nullptr) {
      const Share rows(B, t, threads);
      rms_norm_rows(hidden, final_norm, x, width, eps, rows.begin, rows.end);
      meet(t, FINAL_NORM);
      product(4 * layers, t, false, x_t, LM_HEAD);
      // (no barrier of ours ends the head: its wait is the region's end, not counted)
      if (!clocks.empty()) clocks[t].working[LM_HEAD] += ns_between(clocks[t].last, std::chrono::steady_clock::now());
    }
  }
};

// Whether `w` is panels (N / 16 rounded up, K, 16) of fp32.
bool panels_of(const at::Tensor& w, int64_t K, int64_t N) {
  return w.dim() == 3 && w.size(1) == K && w.size(2) == P && (w.size(0) - 1) * P < N && N <= w.size(0) * P &&
         w.is_contiguous() && w.scalar_type() == at::kFloat;
}

// Whether `w` is an RMS norm's weight of `width` contiguous fp32 values.
bool norm_of(const at::Tensor& w, int64_t width) {
  return w.numel() == width && w.is_contiguous() && w.scalar_type() == at::kFloat;
}

// Whether the team runs this stack: every product on panels of the shapes a Llama layer has, head
// sizes decode_attention takes, and fused q/k/v columns that fill their panels (the rotary pass reads
// its rows unpadded).
bool team_fits(at::TensorList weights, at::IntArrayRef paths, int64_t width, int64_t heads, int64_t kv_heads,
               int64_t D, int64_t intermediate) {
  if (at::in_parallel_region() || heads % kv_heads != 0 || !decode_attention_fits(D, heads / kv_heads)) return false;
  for (int64_t code : paths)
    if (code != PANELS) return false;
  const int64_t qkv = (heads + 2 * kv_heads) * D;
  const int64_t gate_up_panels = weights[4].size(0);
  for (size_t l = 0; l < weights.size() / 6; ++l) {
    const at::Tensor* w = weights.data() + 6 * l;
    if (!norm_of(w[0], width) || !norm_of(w[3], width) || !panels_of(w[1], width, qkv) || qkv % P != 0 ||
        !panels_of(w[2], heads * D, width) || !panels_of(w[4], width, 2 * intermediate) ||
        w[4].size(0) != gate_up_panels || !panels_of(w[5], intermediate, width))
      return false;
  }
  return true;
}

// Site `a`/`b`'s terms for the team (null where no adapter touches it), checked before the threads
// start (nothing in the parallel region may throw).
std::unique_ptr<LowRankSite> low_rank_site(const at::Tensor& a, const at::Tensor& b, int64_t K,
                                           std::vector<int64_t> part_outputs, const AdapterRows& rows, float* low) {
  if (a.numel() == 0) return nullptr;
  const int64_t R = low_rank_columns(a, b, part_outputs, "decode_layers_adapted");
  TORCH_CHECK(a.size(1) == K, "decode_layers_adapted: a site's factors ", a.sizes(), " for inputs of ", K);
  TORCH_CHECK(rows.fits(R), "decode_layers_adapted: a span outside the ", R, " columns of a part");
  return std::make_unique<LowRankSite>(rows, a.const_data_ptr<float>(), b.const_data_ptr<float>(), R, K,
                                       std::move(part_outputs), low);
}

bool team_allowed() {
  const char* team = std::getenv("ENVSUITE_DECODE_TEAM");  // "0": always by op (a diagnostic switch)
  return team == nullptr || std::strcmp(team, "0") != 0;
}

}  // namespace

at::Tensor layers_as_team(const at::Tensor& hidden_in, const at::Tensor& cos_in, const at::Tensor& sin_in,
                          const std::optional<at::Tensor>& mask_in, at::TensorList weights, at::TensorList keys,
                          at::TensorList values, int64_t start, int64_t end, int64_t heads, int64_t kv_heads,
                          int64_t intermediate, double eps, double scale, const std::optional<Head>& head,
                          const Terms* terms) {
  const int64_t layers = (int64_t)keys.size();
  const int64_t B = hidden_in.size(0), width = hidden_in.size(-1), D = keys[0].size(3), I = intermediate;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  at::Tensor hidden = hidden_in.reshape({B, width}).clone();
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  TORCH_CHECK(cos.numel() == B * D && sin.numel() == B * D, "decode_layers: cos/sin of rows x ", D);
  at::Tensor mask;
  if (mask_in.has_value() && mask_in->defined()) {
    mask = mask_in->to(at::kBool).contiguous();
    TORCH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == end + 1 - start, "decode_layers: mask (B, L)");
  }
  const at::Tensor& gate_up_panels = weights[4];
  const int64_t gate_up_ld = gate_up_panels.size(0) * P, narrow_ld = (width + P - 1) / P * P;
  const at::TensorOptions options = hidden.options();
  // One allocation for every buffer between phases (offsets in floats, each a multiple of 16)
  const int64_t qkv_width = (heads + 2 * kv_heads) * D;
  // The LM head runs in the team where it is on panels too (its rows fill the logits buffer).
  const bool team_head = head.has_value() && head->code == PANELS && norm_of(head->norm, width) &&
                         panels_of(head->weight, width, head->vocab);
  const int64_t logits_ld = team_head ? head->weight.size(0) * P : 0;
  const int64_t sizes[] = {B * width, B * qkv_width, B * heads * D, B * kv_heads * D, B * kv_heads * D,
                           B * heads * D, B * narrow_ld, B * gate_up_ld, B * I};
  int64_t total = 0;
  for (int64_t n : sizes) total += (n + P - 1) / P * P;
  at::Tensor scratch = at::empty({total}, options);
  float* cursor = scratch.mutable_data_ptr<float>();
  float* buffers[9];
  for (int i = 0; i < 9; ++i) {
    buffers[i] = cursor;
    cursor += (sizes[i] + P - 1) / P * P;
  }
  TeamStep step{B, width, heads, kv_heads, heads / kv_heads, D, I, layers, start, end, end + 1 - start,
                (float)eps, (float)scale, cos.const_data_ptr<float>(), sin.const_data_ptr<float>(),
                mask.defined() ? mask.const_data_ptr<bool>() : nullptr, {},
                hidden.mutable_data_ptr<float>(), buffers[0], buffers[1], buffers[2], buffers[3], buffers[4],
                buffers[5], buffers[6], buffers[7], buffers[8], gate_up_ld, {}, {},
                team_head ? head->norm.const_data_ptr<float>() : nullptr, SpinBarrier(threads), threads};
  at::Tensor logits = team_head ? at::empty({B, logits_ld}, options) : at::Tensor();
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor& k = keys[l];
    const at::Tensor& v = values[l];
    step.views.push_back({weights[6 * l].const_data_ptr<float>(), weights[6 * l + 3].const_data_ptr<float>(),
                          k.mutable_data_ptr<float>(), v.mutable_data_ptr<float>(), k.stride(0), k.stride(1),
                          k.stride(2), v.stride(0), v.stride(1), v.stride(2)});
  }
  step.products.reserve(4 * layers + 1);
  step.runs.reserve(4 * layers + 1);
  // Items of one panel up to 8 rows: the threads then meet at each product's end within half the time
  // a pair takes (SmolLM2's down product: 9 us a pair at one row); above, a pair's shared loads of x
  // matter more. Step time, one panel against two, AMD EPYC box, 8 alternating rounds: 1 row 0.990,
  // 4 rows 0.970, 8 rows 0.992, 16 rows 1.067.
  const int64_t per_item = B <= 8 ? 1 : 2;
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor* w = weights.data() + 6 * l;
    step.products.emplace_back(step.x, w[1], step.qkv, B, per_item);
    step.products.emplace_back(step.attn, w[2], step.narrow_out, B, per_item);
    step.products.emplace_back(step.x, w[4], step.gate_up, B, per_item);
    step.products.emplace_back(step.mlp, w[5], step.narrow_out, B, per_item);
  }
  // The LM head in pairs at every row count: its thousands of items leave little to wait for at its end.
  if (team_head) step.products.emplace_back(step.x, head->weight, logits.mutable_data_ptr<float>(), B, 2);
  // A multi-adapter step's terms: each site's, on the rows' adapters, with one buffer for x @ a.T
  // (a site's axpys end before the next site's dots begin).
  std::optional<AdapterRows> adapter_rows;
  std::vector<std::unique_ptr<LowRankSite>> sites;
  std::unique_ptr<float[]> low;
  if (terms != nullptr) {
    adapter_rows.emplace(terms->spans.const_data_ptr<int64_t>(), B);
    low.reset(new float[std::max<int64_t>(1, B * 3 * adapter_rows->most)]);
    const int64_t q = heads * D, kv = kv_heads * D;
    const std::vector<int64_t> layer_parts[4] = {{q, kv, kv}, {width}, {I, I}, {width}};
    for (size_t i = 0; i < step.products.size(); ++i) {
      const bool is_head = i == 4 * (size_t)layers;
      sites.push_back(low_rank_site(terms->a[i], terms->b[i], step.products[i].K,
                                    is_head ? std::vector<int64_t>{head->vocab} : layer_parts[i % 4], *adapter_rows,
                                    low.get()));
      step.sites.push_back(sites.back().get());
    }
  }
  for (const PanelProduct& p : step.products) {
    step.runs.emplace_back(threads);
    step.runs.back().reset(p.items());
    step.x_floats = std::max(step.x_floats, p.x_floats());
  }
  const char* timed = std::getenv("ENVSUITE_DECODE_TEAM_CLOCK");
  if (timed != nullptr && std::strcmp(timed, "1") == 0) step.clocks.resize(threads);
#pragma omp parallel num_threads(threads)
  {
    // The runtime may give fewer threads than asked (nested regions, limits): the barrier counts the
    // team it got, and its shares are cut for that team; every product's runs are taken until empty.
    const int64_t team = omp_get_num_threads(), t = omp_get_thread_num();
#pragma omp single
    if (team != threads) {
      step.threads = team;
      step.barrier.resize(team);
    }  // (the end of a single is a barrier)
    step.run(t);
  }
  if (!step.clocks.empty()) {
    Clock& registry = clock_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if ((int64_t)registry.ns.size() < threads * PHASES * 2) registry.ns.resize(threads * PHASES * 2, 0);
    for (int64_t t = 0; t < threads; ++t)
      for (int64_t phase = 0; phase < PHASES; ++phase) {
        registry.ns[(t * PHASES + phase) * 2] += step.clocks[t].working[phase];
        registry.ns[(t * PHASES + phase) * 2 + 1] += step.clocks[t].waiting[phase];
      }
    registry.calls += 1;
  }
  if (team_head) return logits_ld == head->vocab ? logits : logits.narrow(1, 0, head->vocab).contiguous();
  if (head.has_value()) return head_by_op(hidden, *head, eps, terms);
  return hidden.view({B, 1, width});
}

std::tuple<at::Tensor, int64_t> decode_layers_clock(bool reset) {
  Clock& registry = clock_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const int64_t threads = (int64_t)registry.ns.size() / (PHASES * 2);
  at::Tensor ns = at::tensor(at::ArrayRef<int64_t>(registry.ns), at::kLong).view({threads, PHASES, 2});
  const int64_t calls = registry.calls;
  if (reset) {
    registry.ns.assign(registry.ns.size(), 0);
    registry.calls = 0;
  }
  return {ns, calls};
}

bool decode_layers_team(at::TensorList weights, at::IntArrayRef paths, int64_t width, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, int64_t intermediate) {
  TORCH_CHECK(!weights.empty() && weights.size() % 6 == 0 && paths.size() == weights.size() / 6 * 4,
              "decode_layers_team: per layer 6 weights and 4 paths");
  return team_allowed() && team_fits(weights, paths, width, heads, kv_heads, head_dim, intermediate);
}

}  // namespace envsuite
