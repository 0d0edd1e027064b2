
// Follows native_build.PREAMBLE: the includes and v16.
// Decode rows' routed experts: x [N, D] (rows whose slot < 0 are padding: zeros out); weights, experts [N, k];
// gate_up [E, 2I, D]; down [E, D, I] (either with rows or columns contiguous) -> [N, D]. For each expert in
// ascending id, the rows that chose it: h = gate_up[e] x, a = silu(gate) * up, y = down[e] a, out += w y. The
// rows of an expert share each load of its weights; each output's additions run in an order fixed by the shapes
// alone, so a row's result is the same whatever rows share the call.

static inline float sum16(v16 v) {  // the 16 lanes in a fixed order, whatever the width
  float lanes[16];
  store16(lanes, v);
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

constexpr int ROWS = 4;  // rows a pass over the weights serves

// gemv's column form for R rows: x[r][k] times W's k-th row (stride sk) summed over k, a pass of T tiles of
// 16 outputs; the next rows of W are asked for ahead, since a pass reads one short run of each.
template <int R>
static void columns(const float* W, int64_t sk, const float* const* x, float* const* y, int64_t outs, int64_t n) {
  constexpr int T = ACC16 / R > 0 ? ACC16 / R : 1;
  constexpr int AHEAD = 8;  // rows of W asked for ahead
  for (int64_t j0 = 0; j0 < outs; j0 += 16 * T) {
    const int tiles = static_cast<int>(std::min<int64_t>(T, (outs - j0) / 16));
    v16 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = v16{};
    for (int64_t k = 0; k < n; ++k) {
      const float* w = W + k * sk + j0;
      if (k + AHEAD < n)
        for (int t = 0; t < tiles; ++t) __builtin_prefetch(w + AHEAD * sk + 16 * t);
      for (int t = 0; t < tiles; ++t) {
        const v16 wv = load16(w + 16 * t);
        for (int r = 0; r < R; ++r) acc[r][t] += wv * x[r][k];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < tiles; ++t) store16(y[r] + j0 + 16 * t, acc[r][t]);
  }
}

// y[r][j] = sum over k < n of W[j * sj + k * sk] x[r][k] for j < outs and the `rows` (<= ROWS) rows x[r], y[r].
// With sk == 1 as dot products over k (n a multiple of 16), else (sj == 1) as x[r][k] times W's k-th row summed
// over k, a tile of outputs at a time (outs a multiple of 16).
static void gemv(const float* W, int64_t sj, int64_t sk, const float* const* x, float* const* y, int rows,
                 int64_t outs, int64_t n) {
  if (sk == 1) {
    for (int64_t j = 0; j < outs; ++j) {
      v16 a[ROWS];
      for (int r = 0; r < rows; ++r) a[r] = v16{};
      const float* w = W + j * sj;
      for (int64_t k = 0; k < n; k += 16) {
        const v16 wv = load16(w + k);
        for (int r = 0; r < rows; ++r) a[r] += wv * load16(x[r] + k);
      }
      for (int r = 0; r < rows; ++r) y[r][j] = sum16(a[r]);
    }
    return;
  }
  switch (rows) {  // as many 16-output tiles a pass as the registers hold for this many rows
    case 1: return columns<1>(W, sk, x, y, outs, n);
    case 2: return columns<2>(W, sk, x, y, outs, n);
    case 3: return columns<3>(W, sk, x, y, outs, n);
    default: return columns<4>(W, sk, x, y, outs, n);
  }
}

torch::Tensor decode_experts(torch::Tensor x, torch::Tensor weights, torch::Tensor experts, torch::Tensor gate_up,
                             torch::Tensor down, torch::Tensor slots) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "decode_experts: x must be [N, D] float32, contiguous, on the CPU");
  TORCH_CHECK(gate_up.dim() == 3 && down.dim() == 3 && gate_up.scalar_type() == torch::kFloat &&
                  down.scalar_type() == torch::kFloat && (gate_up.stride(1) == 1 || gate_up.stride(2) == 1) &&
                  (down.stride(1) == 1 || down.stride(2) == 1),
              "decode_experts: gate_up [E, 2I, D] and down [E, D, I] must be float32 with rows or columns contiguous");
  const int64_t N = x.size(0), D = x.size(1), E = gate_up.size(0), I = gate_up.size(1) / 2;
  TORCH_CHECK(gate_up.size(1) == 2 * I && gate_up.size(2) == D && down.size(0) == E && down.size(1) == D &&
                  down.size(2) == I && D % 16 == 0 && I % 16 == 0,
              "decode_experts: gate_up [E, 2I, D] and down [E, D, I] must match x [N, D], with D and I multiples of 16");
  TORCH_CHECK(experts.dim() == 2 && experts.size(0) == N && weights.sizes() == experts.sizes(),
              "decode_experts: weights and experts must be [N, k]");
  TORCH_CHECK(slots.dim() == 1 && slots.size(0) == N, "decode_experts: slots must be [N]");
  auto ex = experts.to(torch::kLong).contiguous();
  auto wt = weights.to(torch::kFloat).contiguous();
  auto sl = slots.to(torch::kLong).contiguous();
  const int64_t k = ex.size(1);
  const int64_t *ep = ex.data_ptr<int64_t>(), *sp = sl.data_ptr<int64_t>();
  const float* wp = wt.data_ptr<float>();
  // (row, weight) pairs per expert, rows ascending: a row's experts are then added in ascending id order
  std::vector<std::vector<std::pair<int64_t, float>>> chose(E);
  for (int64_t r = 0; r < N; ++r) {
    if (sp[r] < 0) continue;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t e = ep[r * k + c];
      TORCH_CHECK(e >= 0 && e < E, "decode_experts: expert id ", e, " out of range [0, ", E, ")");
      chose[e].emplace_back(r, wp[r * k + c]);
    }
  }
  auto out = torch::zeros_like(x);
  const float *xp = x.data_ptr<float>(), *gp = gate_up.data_ptr<float>(), *dp = down.data_ptr<float>();
  float* op = out.data_ptr<float>();
  std::vector<float> h(ROWS * 2 * I), y(ROWS * D);
  for (int64_t e = 0; e < E; ++e) {
    const auto& pairs = chose[e];
    for (size_t first = 0; first < pairs.size(); first += ROWS) {
      const int rows = static_cast<int>(std::min<size_t>(ROWS, pairs.size() - first));
      const float* xr[ROWS];
      float *hr[ROWS], *yr[ROWS];
      for (int r = 0; r < rows; ++r) {
        xr[r] = xp + pairs[first + r].first * D;
        hr[r] = h.data() + r * 2 * I;
        yr[r] = y.data() + r * D;
      }
      gemv(gp + e * gate_up.stride(0), gate_up.stride(1), gate_up.stride(2), xr, hr, rows, 2 * I, D);
      for (int r = 0; r < rows; ++r)
        for (int64_t i = 0; i < I; ++i) {
          const float g = hr[r][i];
          hr[r][i] = g / (1.0f + std::exp(-g)) * hr[r][I + i];
        }
      const float* ar[ROWS];
      for (int r = 0; r < rows; ++r) ar[r] = hr[r];
      gemv(dp + e * down.stride(0), down.stride(1), down.stride(2), ar, yr, rows, D, I);
      for (int r = 0; r < rows; ++r) {
        float* o = op + pairs[first + r].first * D;
        const float w = pairs[first + r].second;
        for (int64_t d = 0; d < D; ++d) o[d] += w * yr[r][d];
      }
    }
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_experts", &decode_experts, pybind11::call_guard<pybind11::gil_scoped_release>());
}
