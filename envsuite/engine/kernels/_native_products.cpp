// Matrix products, fp32, out = x @ W.T (+ bias), x (M, K) row-major:
//   rows_linear   W plain (N, K) row-major; each W row is read once for all M rows of x (M small:
//                 a decode step of 1-8 rows is a stream over the weights, as fast as memory allows).
//   panel_linear  W as panels (ceil(N / 16), K, 16): 16 output columns' weights interleaved by k, so one
//                 vector load gives 16 columns' weights at one k. A microkernel keeps up to MR rows x 32
//                 columns of accumulators in registers (MR_DECODE for a decode step's 9-48 rows); every
//                 weight is read once per chunk of rows (once in all for one chunk) and sequentially, so it
//                 serves 1 to thousands of rows on one layout. Several chunks walk k in blocks that stay
//                 in L1 between them; one chunk (1-12 rows) passes over the whole K at once, and 13-16
//                 rows take each panel in one such pass over all rows, x read k-major (BY_K_ROWS_MIN).
// Each output's sum runs over k in order within a vector lane; rows_linear then adds the lanes as a tree.
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <vector>

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
#endif
// Below AVX-512: 16 vector registers (AVX2's of 8 floats, SSE's of 4), so a panel row of 16 floats takes
// RV = 2 or 4 of them, and MR rows x a panel pair would hold 4 x 2 x RV registers of accumulators before
// any weight or broadcast. Rows per chunk by item width instead, 12 registers of accumulators, as an
// AVX2 GEMM blocks its registers (6 x 16 floats): AVX2 6 rows of one panel or 3 of a pair (+ 2 or 4
// weights + 1 broadcast; the compiler reads weights from L1 inside the multiply-adds), SSE 3 or 1.
// (Until 2026-11-29 every accumulator of these builds lived on the stack, _native.h's rvec, and the
// chunks were MR = 4 rows of either width: the step's products from memory on the AMD EPYC Zen 3 box
// took 111-220 ms at one row and 3.3-4.8 s at 64, now 22-41 ms and 149-297 ms, under load 5-7.)
constexpr int ACCUMULATORS = 12;

// Rows per chunk of an M-row product whose items are `per_item` panels wide.
int64_t rows_per_chunk(int64_t M, int64_t per_item) {
#if defined(__AVX512F__)
  (void)per_item;
  return M <= DECODE_ROWS ? MR_DECODE : MR;
#else
  (void)M;
  return std::max<int64_t>(1, ACCUMULATORS / (RV * per_item));
#endif
}

// 13-16 rows, "by k": each panel of an item in one pass over every row (16 accumulators) and its whole
// K, x read from a k-major copy (x_t[k * M + r]: one pointer serves all rows' broadcasts; row-major x
// would need one per row, more than the general registers, and that kernel ran 1.40x slower from
// cache). A thread then reads its panels as one sequential stream; each k step asks for the line
// STREAM_AHEAD_BYTES further on. In 12 + 4 row chunks the 4-row pass asked for nothing (see
// PanelProduct::item): a quarter of each block's time without read-ahead. Measured on the AMD EPYC box,
// slow-memory phase (43-47 GB/s), 1.000 = the 12 + 4 chunks:
//   SmolLM2's 30 layers of products from memory, 16 rows, passes in k blocks of KC as the chunks
//   (x made k-major outside the timing): 0.883; from cache 1.008;
//   the decode step in one process, the two ways alternating, 8 rounds, in k blocks: 16 rows 0.888,
//   13 rows 0.912 (the copies of x by scalar loops: 0.911 and 0.927);
//   then the whole K in one pass against k blocks: the products 0.923 from memory and 0.960 from cache;
//   the step at 16 rows 0.943-0.974 (16, 32 and 64 KB ahead, equal within 0.6%; 128 KB 0.992, 256 KB
//   1.022), at 13 rows 0.939-0.945; 8 and 16 KB against 32: 1.000 and 0.981 at 16 rows, 0.986 at 13;
//   12 + 4 chunks of 8 + 8 instead: from memory 1.073, from cache 1.021; by k at 8-12 rows: 1.005-1.037;
//   32 and 64 rows as passes of 16 by k (in k blocks): 1.030 and 1.044.
#if defined(__AVX512F__)
constexpr int64_t BY_K_ROWS_MIN = 13, BY_K_ROWS_MAX = 16;
#else
constexpr int64_t BY_K_ROWS_MIN = 1, BY_K_ROWS_MAX = 0;  // never
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

// Weights asked for ahead of their use: the k block AHEAD_BLOCKS blocks later in a thread's order (this
// panel pair's later blocks, then the next pairs'), its lines shared out among the row chunks of the
// current block (chunk c asks for lines c, c + chunks, ...), so the requests spread over the block's
// whole compute time. At 32 and 64 rows the loads of a k block's first row chunk waited on memory:
// SmolLM2's 30 layers of products, 30 distinct weights per shape, AMD EPYC box, two rounds each:
//   the next block, asked for by the first chunk only (before):   32 rows 16.6-17.4 ms, 64 rows 30.7-31.7
//   4 blocks ahead, shared out:                                    15.9-16.3, 28.8-29.9
//   2 / 8 / 12 blocks ahead, shared out:            16.7-16.9 / 17.6-18.1 / 17.1-17.8, 29.7-30.0 / 30.9-31.6 / 31.2-31.4
//   6 blocks ahead, shared out:                                    15.5-15.7, 28.7-29.3
//   4 blocks ahead, first chunk only:                              16.6-16.8, 30.6-30.7
//   into L2 only (prefetcht1 / prefetcht2), 8 or 16 blocks ahead:  18.2-19.9, 31.8-34.3 (a later
//   round against 4 blocks into L1 at 16.4-16.6, 30.2-31.4; 8 rows no faster either)
// 4 rather than 6: 8 and 12 fall off, and 6 sits next to that edge on a CPU whose caches differ. One row
// and 8 rows stay within noise (the stream is at memory speed either way).
//
// Where K is not a multiple of KC, an item's last block is short (SmolLM2's K = 576: blocks of 256, 256
// and 64), and a block asks for as many lines as it has k steps. A block 4 ahead is then, by turns, a
// short one asked for by a long one (fine) and a long one asked for by the short one: three quarters of
// it never asked for. Such products read one item ahead instead (the same block of the next item: the
// same length), when that is at most 2 * AHEAD_BLOCKS blocks. The step measured on the AMD EPYC box
// (SmolLM2, in one process, 8-10 rounds; 4 blocks ahead = 1.000): 3 blocks (one item of K = 576)
// 0.915-0.977 at one row, 0.971-0.984 at 16 rows, 0.976 at 64; 5 and 7 blocks (misaligned) 1.006-1.114;
// 6 blocks (two items) 0.944-0.986.
constexpr int64_t AHEAD_BLOCKS = 4;

// Rows in one chunk (1-12 with AVX-512) make one pass over the whole K instead (PanelProduct::item),
// as the 13-16 rows by k do; items of one panel ask STREAM_AHEAD_BYTES ahead in their stream. The step
// in one process on the AMD EPYC box, against the k-blocked pass (1.000), two runs of 8 rounds, one in
// each memory phase, at 1 / 4 / 8 rows:
//   2 KB: 1.032 / 1.089 / 1.145;  4 KB: 0.981 / 1.018 / 1.029;
//   8 KB: 0.934-0.948 / 0.961-0.965 / 0.930-0.967;  16 KB: 0.975-0.977 / 0.957-0.964 / 0.940-0.971;
//   32 KB: 0.993 / 0.995 / 0.984;  64 KB: 1.023 / 0.989 / 0.954.
// Pairs (9-12 rows) ask for the next item's lines at the same k: 12 rows 0.946-0.949.
constexpr int64_t STREAM_AHEAD_BYTES = 8 << 10;

// How many k blocks ahead a product of `blocks` blocks of K reads (see above).
int64_t ahead_blocks(int64_t K, int64_t blocks) {
  return K % KC != 0 && blocks <= 2 * AHEAD_BLOCKS ? blocks : AHEAD_BLOCKS;
}

struct Ahead {
  const float* w0;
  const float* w1;
  int64_t every;  // one line of each panel every `every` k steps, `every` lines apart
};

// rows [r0, r0 + R) x one panel pair (or one panel) over k in [k0, k1), accumulating into out, asking
// for the lines `ahead` names along the way.

template <int R, bool TWO>
inline void panel_micro(const float* x, int64_t K, const float* w0, const float* w1, int64_t k0, int64_t k1,
                        float* out, int64_t ldo, Ahead ahead) {
  rvec a0[R][RV], a1[R][RV];  // rvecs, not vecs: see _native.h
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < RV; ++v) {
      a0[r][v] = k0 ? rload(out + r * ldo + v * RW) : rvec{};
      a1[r][v] = (TWO && k0) ? rload(out + r * ldo + P + v * RW) : rvec{};
    }
  }
  int64_t left = 0;
  for (int64_t k = k0; k < k1; ++k) {
    if (left-- == 0) {
      __builtin_prefetch(ahead.w0, 0, 3);
      __builtin_prefetch(ahead.w1, 0, 3);
      ahead.w0 += ahead.every * P;
      ahead.w1 += ahead.every * P;
      left = ahead.every - 1;
    }
    rvec b0[RV], b1[RV];
    for (int v = 0; v < RV; ++v) {
      b0[v] = rload(w0 + k * P + v * RW);
      b1[v] = TWO ? rload(w1 + k * P + v * RW) : rvec{};
    }
    for (int r = 0; r < R; ++r) {
      const float s = x[r * K + k];
      for (int v = 0; v < RV; ++v) {
        a0[r][v] += s * b0[v];
        if (TWO) a1[r][v] += s * b1[v];
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < RV; ++v) {
      rstore(out + r * ldo + v * RW, a0[r][v]);
      if (TWO) rstore(out + r * ldo + P + v * RW, a1[r][v]);
    }
  }
}

// rows [0, R) x one panel over its whole K, x k-major (x_t[k * R + r]), otherwise as panel_micro: the
// same products summed in the same order, so the same sums bit for bit. One pointer serves every row's
// broadcast (row-major x needs one per row: 16 of them do not fit the general registers).
template <int R>
inline void panel_micro_by_k(const float* x_t, const float* w, int64_t K, float* out, int64_t ldo, Ahead ahead) {
  rvec a[R][RV] = {};
  int64_t left = 0;
  for (int64_t k = 0; k < K; ++k) {
    if (left-- == 0) {
      __builtin_prefetch(ahead.w0, 0, 3);
      ahead.w0 += ahead.every * P;
      left = ahead.every - 1;
    }
    rvec b[RV];
    for (int v = 0; v < RV; ++v) b[v] = rload(w + k * P + v * RW);
    const float* xk = x_t + k * R;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < RV; ++v) a[r][v] += xk[r] * b[v];
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < RV; ++v) rstore(out + r * ldo + v * RW, a[r][v]);
}

void panel_by_k(const float* x_t, const float* w, int64_t K, float* out, int64_t ldo, int rows, Ahead ahead) {
  switch (rows) {
#if defined(__AVX512F__)
#define ENVSUITE_BY_K_CASE(R) \
  case R:                     \
    panel_micro_by_k<R>(x_t, w, K, out, ldo, ahead); \
    break;
    ENVSUITE_BY_K_CASE(13)
    ENVSUITE_BY_K_CASE(14)
    ENVSUITE_BY_K_CASE(15)
    ENVSUITE_BY_K_CASE(16)
#undef ENVSUITE_BY_K_CASE
#endif
    default:
      TORCH_CHECK(false, "panel_linear: bad k-major row count");
  }
}

template <bool TWO>
void panel_rows(const float* x, int64_t K, const float* w0, const float* w1, int64_t k0, int64_t k1, float* out,
                int64_t ldo, int rows, Ahead ahead) {
  switch (rows) {
#define ENVSUITE_PANEL_CASE(R) \
  case R:                      \
    panel_micro<R, TWO>(x, K, w0, w1, k0, k1, out, ldo, ahead); \
    break;
    ENVSUITE_PANEL_CASE(1)
    ENVSUITE_PANEL_CASE(2)
    ENVSUITE_PANEL_CASE(3)
    ENVSUITE_PANEL_CASE(4)
#if defined(__AVX512F__) || defined(__AVX2__)
    ENVSUITE_PANEL_CASE(5)
    ENVSUITE_PANEL_CASE(6)
#endif
#if defined(__AVX512F__)
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

// Items [0, n) shared out among `threads` workers, each item to exactly one call of body(item): worker t
// walks forward through its own run of items (the t-th of equal contiguous runs), then takes items one
// at a time from the back of the other runs until none is left (StealingRuns, _native.h). Below
// `grain_items` items, or inside a parallel region, one thread walks them all.
template <typename F>
void stealing_for(int64_t n, int64_t grain_items, const F& body) {
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  if (threads <= 1 || n < grain_items || at::in_parallel_region()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  StealingRuns runs(threads);
  runs.reset(n);
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t i = runs.take(t); i >= 0; i = runs.take(t)) body(i);
  });
}

}  // namespace

// ------------------------------------------------------------------------------------------ panels

PanelProduct::PanelProduct(const float* x, const at::Tensor& panels, float* out, int64_t M, int64_t per_item)
    : x(x),
      panels(panels.const_data_ptr<float>()),
      out(out),
      M(M),
      K(panels.size(1)),
      npanels(panels.size(0)),
      ldo(panels.size(0) * P),
      chunk(rows_per_chunk(M, per_item)),
      blocks((panels.size(1) + KC - 1) / KC),
      per_item(per_item),
      blocks_ahead(ahead_blocks(K, blocks)),
      by_k(BY_K_ROWS_MIN <= M && M <= BY_K_ROWS_MAX) {
  TORCH_CHECK(per_item == 1 || per_item == 2, "PanelProduct: items of one or two panels");
}

#if defined(__AVX512F__)
// One stage of a 16 x 16 transpose in registers: rows i and i + B (i & B == 0) trade blocks of B floats,
// row i keeping the first block of each 2B and taking row i + B's, row i + B the second blocks. After
// B = 8, 4, 2, 1 row j holds column j. (Lane indices 16-31 name the second row: ENVSUITE_SHUFFLE2.)
template <int B>
inline void trade_blocks(vec* m) {
  static_assert(B == 8 || B == 4 || B == 2 || B == 1);
  for (int i = 0; i < 16; ++i) {
    if (i & B) continue;
    const vec a = m[i], b = m[i + B];
    if constexpr (B == 8) {
      m[i] = ENVSUITE_SHUFFLE2(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
      m[i + B] = ENVSUITE_SHUFFLE2(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    } else if constexpr (B == 4) {
      m[i] = ENVSUITE_SHUFFLE2(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
      m[i + B] = ENVSUITE_SHUFFLE2(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    } else if constexpr (B == 2) {
      m[i] = ENVSUITE_SHUFFLE2(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
      m[i + B] = ENVSUITE_SHUFFLE2(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    } else {
      m[i] = ENVSUITE_SHUFFLE2(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
      m[i + B] = ENVSUITE_SHUFFLE2(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
  }
}

// x (R rows of K) k-major into x_t: x_t[k * R + r] = x[r * K + k]; 16 k at a time through registers.
template <int R>
void transpose_rows(const float* x, int64_t K, float* x_t) {
  const int64_t kv = K - K % P;
  for (int64_t k = 0; k < kv; k += P) {
    vec m[16];
    for (int r = 0; r < 16; ++r) m[r] = r < R ? load(x + r * K + k) : vec{};
    trade_blocks<8>(m);
    trade_blocks<4>(m);
    trade_blocks<2>(m);
    trade_blocks<1>(m);
    for (int j = 0; j < 16; ++j) std::memcpy(x_t + (k + j) * R, &m[j], R * sizeof(float));
  }
  for (int64_t k = kv; k < K; ++k)
    for (int r = 0; r < R; ++r) x_t[k * R + r] = x[r * K + k];
}
#endif

void PanelProduct::transpose_x(float* x_t) const {
  switch (M) {
#if defined(__AVX512F__)
    case 13: transpose_rows<13>(x, K, x_t); return;
    case 14: transpose_rows<14>(x, K, x_t); return;
    case 15: transpose_rows<15>(x, K, x_t); return;
    case 16: transpose_rows<16>(x, K, x_t); return;
#endif
    default:
      TORCH_CHECK(false, "panel_linear: bad k-major row count");  // by_k holds only for 13-16 rows
  }
}

// 13-16 rows: each panel of the item in one pass over all rows and the whole K, x read k-major, each k
// step asking for the line STREAM_AHEAD_BYTES on in the thread's stream of panels.
void PanelProduct::item_by_k(int64_t item, const float* x_t) const {
  const int64_t p0 = per_item * item;
  for (int64_t q = 0, here = std::min(per_item, npanels - p0); q < here; ++q) {
    const float* w = panels + (p0 + q) * K * P;
    const float* ahead = w + STREAM_AHEAD_BYTES / sizeof(float);
    panel_by_k(x_t, w, K, out + (p0 + q) * P, ldo, (int)M, Ahead{ahead, ahead, 1});
  }
}

void PanelProduct::item(int64_t item, const float* x_t) const {
  if (by_k) {
    item_by_k(item, x_t);
    return;
  }
  const int64_t p0 = per_item * item;
  const bool two = per_item == 2 && p0 + 1 < npanels;
  const float* w0 = panels + p0 * K * P;
  const float* w1 = w0 + K * P;
  const int64_t chunks = (M + chunk - 1) / chunk;
  if (chunks == 1) {
    // One chunk of rows: its pass over the whole K (no k blocks to keep in L1 for a next chunk), each k
    // step asking for a line of the same panel STREAM_AHEAD_BYTES on (one panel: a thread's items
    // are one sequential stream) or of the next item's panels at the same k (a pair).
    if (two) {
      const float* next = w0 + per_item * K * P;
      panel_rows<true>(x, K, w0, w1, 0, K, out + p0 * P, ldo, (int)M, Ahead{next, next + K * P, 1});
    } else {
      const float* ahead = w0 + STREAM_AHEAD_BYTES / sizeof(float);
      panel_rows<false>(x, K, w0, w1, 0, K, out + p0 * P, ldo, (int)M, Ahead{ahead, ahead, 1});
    }
    return;
  }
  // The row chunks that share out the lines to ask for: all but a last chunk of under half a chunk's
  // rows, whose pass is over too soon. At 16 rows (chunks of 12 and 4) the 4-row pass asked for half
  // of each block's lines in a quarter of its time. Measured on the AMD EPYC box, SmolLM2's step
  // products from memory (bench/panel_products.py's workload, three alternating rounds): 16 rows
  // 11.77-11.94 -> 10.85-11.23 ms; 28 rows (12 + 12 + 4) 13.97-14.07 -> 13.73-14.09; the decode step
  // at 16 rows 19.1-19.5 -> 17.6-18.6 ms. The left-out chunk asks for one line at its start (the line
  // chunk 0 asks for first), so the loop needs no second variant.
  const int64_t asking = chunks > 1 && M % chunk != 0 && 2 * (M % chunk) < chunk ? chunks - 1 : chunks;
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t k1 = std::min(K, k0 + KC);
    // The k block `blocks_ahead` later: this item's, then the next items' (a thread walks its run
    // forward; past the last panel a prefetch never faults).
    const int64_t later = (k0 / KC) + blocks_ahead;
    const int64_t later_panel = p0 + per_item * (later / blocks), later_k = (later % blocks) * KC;
    const float* l0 = panels + later_panel * K * P + later_k * P;
    for (int64_t r0 = 0, c = 0; r0 < M; r0 += chunk, ++c) {
      const int rows = (int)std::min<int64_t>(chunk, M - r0);
      float* o = out + r0 * ldo + p0 * P;
      const Ahead ahead = c < asking ? Ahead{l0 + c * P, l0 + (per_item - 1) * K * P + c * P, asking}
                                     : Ahead{l0, l0 + (per_item - 1) * K * P, KC + 1};
      if (two) {
        panel_rows<true>(x + r0 * K, K, w0, w1, k0, k1, o, ldo, rows, ahead);
      } else {
        panel_rows<false>(x + r0 * K, K, w0, w1, k0, k1, o, ldo, rows, ahead);
      }
    }
  }
}

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
  at::Tensor out = at::empty({M, npanels * P}, x.options());
  const PanelProduct product(x.const_data_ptr<float>(), panels, out.mutable_data_ptr<float>(), M);
  std::vector<float> x_t(product.x_floats());
  if (product.by_k) product.transpose_x(x_t.data());
  stealing_for(product.items(), grain(2 * M * K * 2 * P), [&](int64_t pair) { product.item(pair, x_t.data()); });
  auto shape = x.sizes().vec();
  shape.back() = N;
  at::Tensor result = out.size(1) == N ? out : out.narrow(1, 0, N).contiguous();
  return with_bias(result.view(shape), bias);
}

// Rows `ids` (any shape) of the (N, K) matrix `panels` (ceil(N / 16), K, 16) holds: (*ids.shape, K). An
// input embedding tied to an LM head on panels reads its rows here. Through torch's indexing
// (panels[ids // 16, :, ids % 16]: three operations, an advanced-index gather among them) the step's
// embedding took ~0.1 ms at 1-16 rows, measured around the call in the decode step.
at::Tensor panel_rows(const at::Tensor& panels, const at::Tensor& ids_in, int64_t N) {
  TORCH_CHECK(panels.dim() == 3 && panels.size(2) == P && panels.scalar_type() == at::kFloat &&
                  panels.is_contiguous() && panels.device().is_cpu(),
              "panel_rows: contiguous float32 panels (N / 16, K, 16) on the CPU");
  TORCH_CHECK(N > (panels.size(0) - 1) * P && N <= panels.size(0) * P, "panel_rows: ", N, " rows in ",
              panels.size(0), " panels");
  TORCH_CHECK(!at::isFloatingType(ids_in.scalar_type()) && ids_in.device().is_cpu(),
              "panel_rows: integer ids on the CPU");
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const int64_t K = panels.size(1), n = ids.numel();
  auto shape = ids.sizes().vec();
  shape.push_back(K);
  at::Tensor out = at::empty(shape, panels.options());
  const int64_t* id = ids.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(id[i] >= 0 && id[i] < N, "panel_rows: id ", id[i], " out of range for ", N, " rows");
  const float* base = panels.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = base + (id[i] / P) * K * P + id[i] % P;
    for (int64_t k = 0; k < K; ++k) o[i * K + k] = row[k * P];
  }
  return out;
}

}  // namespace envsuite
