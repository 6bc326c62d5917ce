// A multi-adapter decode step's low-rank terms (low_rank_add_): at one product site, each row's own
// LoRA adapter's term added into the site's base product in one call, in place of torch's three
// operations (x @ A.T over every adapter's columns, a mask zeroing the other adapters' ones, and
// the product with B). envsuite/engine/sampling/_adapters.py lays the site's factors out: every
// adapter's down projections stacked in `a` ([parts * R, K], each fused part's block of R rows),
// their up projections (scale folded in) in `b` ([parts * R, N], part p's rows non-zero only in part
// p's output columns). A row computes only its own adapter's columns and reads only its own part's
// blocks of b; rows of one adapter share each load of its factors.
#include <ATen/Parallel.h>

#include <memory>
#include <vector>

#include "_native.h"

namespace envsuite {

namespace {

// Accumulators in rvecs (_native.h: GCC 12 keeps a loop-carried `vec` wider than the registers in
// memory; a first version on `vec` ran 3-5x slower than torch's path on the AMD EPYC Zen 3 box, AVX2).
constexpr int V = RW;
#if defined(__AVX512F__)
constexpr int RB = 4;  // rows per tile: 4 x 2 or 4 accumulators of 32 registers
#else
constexpr int RB = 2;  // 2 x 4 accumulators + loads of 16 registers
#endif
constexpr int CV = 32 / V < 4 ? 32 / V : 4;  // vectors of output columns per tile (32 floats, or 16)
constexpr int CB = 4;                          // columns of x @ a.T per tile

inline float rsum(rvec v) {
  float sum = 0.f;
  for (int i = 0; i < V; ++i) sum += v[i];
  return sum;
}

// low[r][c] = x[r] . a[c] over K for R_ rows and C_ columns (rows of x and of a: K contiguous floats).
template <int R_, int C_>
inline void dot_tile(const float* const* x, const float* const* a, int64_t K, float* const* low) {
  rvec acc[R_][C_] = {};
  const int64_t kv = K - K % V;
  for (int64_t k = 0; k < kv; k += V) {
    rvec xv[R_];
    for (int r = 0; r < R_; ++r) xv[r] = rload(x[r] + k);
    for (int c = 0; c < C_; ++c) {
      const rvec av = rload(a[c] + k);
      for (int r = 0; r < R_; ++r) acc[r][c] += xv[r] * av;
    }
  }
  for (int r = 0; r < R_; ++r)
    for (int c = 0; c < C_; ++c) {
      float sum = rsum(acc[r][c]);
      for (int64_t k = kv; k < K; ++k) sum += x[r][k] * a[c][k];
      low[r][c] = sum;
    }
}

template <int R_>
inline void dot_rows(const float* const* x, const float* const* a, int64_t K, float* const* low, int columns) {
  switch (columns) {
    case 1: return dot_tile<R_, 1>(x, a, K, low);
    case 2: return dot_tile<R_, 2>(x, a, K, low);
    case 3: return dot_tile<R_, 3>(x, a, K, low);
    default: return dot_tile<R_, CB>(x, a, K, low);
  }
}

// out[r][0, C_ V) += low[r] @ b(W rows of stride ldb, those columns) for R_ rows.
template <int R_, int C_>
inline void axpy_tile(const float* const* low, const float* b, int64_t ldb, int64_t W, float* const* out) {
  rvec acc[R_][C_] = {};
  for (int64_t j = 0; j < W; ++j) {
    rvec bv[C_];
    for (int c = 0; c < C_; ++c) bv[c] = rload(b + j * ldb + c * V);
    for (int r = 0; r < R_; ++r) {
      const float l = low[r][j];
      for (int c = 0; c < C_; ++c) acc[r][c] += l * bv[c];
    }
  }
  for (int r = 0; r < R_; ++r)
    for (int c = 0; c < C_; ++c) rstore(out[r] + c * V, rload(out[r] + c * V) + acc[r][c]);
}

// The same over `count` columns: tiles of CV vectors, then single vectors, then one float at a time.
template <int R_>
inline void axpy_rows(const float* const* low, const float* b, int64_t ldb, int64_t W, float* const* out,
                      int64_t count) {
  int64_t c = 0;
  float* o[R_];
  for (; c + CV * V <= count; c += CV * V) {
    for (int r = 0; r < R_; ++r) o[r] = out[r] + c;
    axpy_tile<R_, CV>(low, b + c, ldb, W, o);
  }
  for (; c + V <= count; c += V) {
    for (int r = 0; r < R_; ++r) o[r] = out[r] + c;
    axpy_tile<R_, 1>(low, b + c, ldb, W, o);
  }
  for (; c < count; ++c)
    for (int r = 0; r < R_; ++r) {
      float sum = 0.f;
      for (int64_t j = 0; j < W; ++j) sum += low[r][j] * b[j * ldb + c];
      out[r][c] += sum;
    }
}

}  // namespace

AdapterRows::AdapterRows(const int64_t* spans, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = spans[2 * r], width = spans[2 * r + 1];
    if (width == 0) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.start == start && g.width == width; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{start, width, {}});
    it->rows.push_back(r);
    most = std::max(most, width);
    least_start = std::min(least_start, start);
    least_width = std::min(least_width, width);
    most_end = std::max(most_end, start + width);
  }
}

int64_t low_rank_columns(const at::Tensor& a, const at::Tensor& b, at::IntArrayRef part_outputs, const char* op) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, op, ": float32 factors");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && a.dim() == 2 && b.dim() == 2, op,
              ": contiguous 2-d factors");
  const int64_t parts = (int64_t)part_outputs.size();
  int64_t widths = 0;
  for (const int64_t w : part_outputs) widths += w;
  TORCH_CHECK(parts > 0 && a.size(0) % parts == 0 && b.size(0) == a.size(0) && b.size(1) == widths, op,
              ": factors ", a.sizes(), " and ", b.sizes(), " for parts of ", part_outputs, " columns");
  return a.size(0) / parts;
}

LowRankSite::LowRankSite(const AdapterRows& rows, const float* a, const float* b, int64_t R, int64_t K,
                         std::vector<int64_t> part_outputs, float* low)
    : rows_(rows), a_(a), b_(b), R_(R), K_(K), parts_(std::move(part_outputs)), low_(low) {
  N_ = 0;
  for (const int64_t w : parts_) N_ += w;
  const int64_t parts = (int64_t)parts_.size();
  ldl_ = parts * rows.most;
  for (const AdapterRows::Group& g : rows.groups)
    for (int64_t p = 0; p < parts; ++p)
      for (int64_t c = 0; c < g.width; c += CB) dots_.push_back({&g, p, c});
  for (int64_t p = 0, column = 0; p < parts; column += parts_[p], ++p)
    for (int64_t c = 0; c < parts_[p]; c += 32) axpys_.push_back({p, column + c, std::min<int64_t>(32, parts_[p] - c)});
}

// x @ a.T for CB columns of one part of one adapter, over all its rows (x: rows of K floats).
void LowRankSite::dot(int64_t i, const float* x) const {
  const DotItem& item = dots_[i];
  const AdapterRows::Group& g = *item.group;
  const int64_t first = item.part * R_ + g.start + item.column, at = item.part * rows_.most + item.column;
  const int columns = (int)std::min<int64_t>(CB, g.width - item.column);
  const float* ac[CB];
  for (int c = 0; c < CB; ++c) ac[c] = a_ + (first + std::min(c, columns - 1)) * K_;
  const int64_t n = (int64_t)g.rows.size();
  for (int64_t k = 0; k < n; k += RB) {
    const float* xr[RB];
    float* lr[RB];
    const int rows_here = (int)std::min<int64_t>(RB, n - k);
    for (int r = 0; r < rows_here; ++r) {
      xr[r] = x + g.rows[k + r] * K_;
      lr[r] = low_ + g.rows[k + r] * ldl_ + at;
    }
    if (rows_here == RB) {
      dot_rows<RB>(xr, ac, K_, lr, columns);
    } else {
      for (int r = 0; r < rows_here; ++r) dot_rows<1>(xr + r, ac, K_, lr + r, columns);
    }
  }
}

// out += low @ b over up to 32 output columns of one part, every adapter's rows; returns the columns.
std::pair<int64_t, int64_t> LowRankSite::axpy(int64_t i, float* out, int64_t ldo) const {
  const AxpyItem& item = axpys_[i];
  for (const AdapterRows::Group& g : rows_.groups) {
    const float* bb = b_ + (item.part * R_ + g.start) * N_ + item.column;
    const int64_t n = (int64_t)g.rows.size(), at = item.part * rows_.most;
    for (int64_t k = 0; k < n; k += RB) {
      const float* lr[RB];
      float* orow[RB];
      const int rows_here = (int)std::min<int64_t>(RB, n - k);
      for (int r = 0; r < rows_here; ++r) {
        lr[r] = low_ + g.rows[k + r] * ldl_ + at;
        orow[r] = out + g.rows[k + r] * ldo + item.column;
      }
      if (rows_here == RB) {
        axpy_rows<RB>(lr, bb, N_, g.width, orow, item.count);
      } else {
        for (int r = 0; r < rows_here; ++r) axpy_rows<1>(lr + r, bb, N_, g.width, orow + r, item.count);
      }
    }
  }
  return {item.column, item.column + item.count};
}

int64_t LowRankSite::dot_flops() const {
  int64_t flops = 0;
  for (const DotItem& item : dots_) flops += 2 * CB * K_ * (int64_t)item.group->rows.size();
  return flops;
}

int64_t LowRankSite::axpy_flops() const {
  int64_t flops = 0;  // per item
  for (const AdapterRows::Group& g : rows_.groups) flops += 64 * g.width * (int64_t)g.rows.size();
  return flops;
}

// out[r] += (x[r] @ a[cols(r)].T) @ b[cols(r)] for each row r, cols(r) its adapter's columns in every
// part (spans[r] = (start, width) within a part's R; width 0: the row gets no term), b's rows of part p
// read only in part p's output columns (part_outputs: each part's width, in order). out is changed in
// place and returned.
at::Tensor low_rank_add_(at::Tensor out, const at::Tensor& x_in, const at::Tensor& a, const at::Tensor& b,
                         const at::Tensor& spans_in, at::IntArrayRef part_outputs) {
  TORCH_CHECK(out.scalar_type() == at::kFloat && x_in.scalar_type() == at::kFloat, "low_rank_add_: float32 tensors");
  const int64_t R = low_rank_columns(a, b, part_outputs, "low_rank_add_");
  const int64_t parts = (int64_t)part_outputs.size(), K = a.size(1), N = b.size(1);
  TORCH_CHECK(out.size(-1) == N && x_in.size(-1) == K, "low_rank_add_: ", out.sizes(), " += ", x_in.sizes(),
              " through ", a.sizes(), " and ", b.sizes());
  const int64_t rows = N ? out.numel() / N : 0;
  const at::Tensor view = out.view({rows, N});
  TORCH_CHECK(view.stride(1) == 1, "low_rank_add_: out's rows must have unit stride");
  const at::Tensor x = x_in.contiguous();
  const at::Tensor spans = spans_in.to(at::kLong).contiguous();
  TORCH_CHECK(x.numel() == rows * K && spans.numel() == rows * 2, "low_rank_add_: ", rows, " rows of out, ",
              x.numel() / std::max<int64_t>(K, 1), " of x, ", spans.numel() / 2, " spans");
  const AdapterRows groups(spans.const_data_ptr<int64_t>(), rows);
  TORCH_CHECK(groups.fits(R), "low_rank_add_: a span outside the ", R, " columns of a part");
  if (groups.groups.empty()) return out;
  // low[r, p * most + j]: row r's term's j-th column of part p (only its own adapter's columns).
  std::unique_ptr<float[]> low(new float[rows * parts * groups.most]);
  const LowRankSite site(groups, a.const_data_ptr<float>(), b.const_data_ptr<float>(), R, K,
                         std::vector<int64_t>(part_outputs.begin(), part_outputs.end()), low.get());
  const float* xp = x.const_data_ptr<float>();
  const int64_t n_dots = site.dot_items();
  at::parallel_for(0, n_dots, grain(site.dot_flops() / n_dots), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) site.dot(i, xp);
  });
  float* op = view.mutable_data_ptr<float>();
  const int64_t ldo = view.stride(0);
  at::parallel_for(0, site.axpy_items(), grain(site.axpy_flops()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) site.axpy(i, op, ldo);
  });
  return out;
}

}  // namespace envsuite
