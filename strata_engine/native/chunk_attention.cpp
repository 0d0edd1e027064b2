
// Follows native_build.PREAMBLE: the includes, v16 (load16, store16, splat, select) and exp_nonpositive.
static inline float hsum(v16 v) {  // a fixed tree
  float s[16];
  store16(s, v);
  for (int w = 8; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  return s[0];
}
static inline float hmax(v16 v) {
  float s[16];
  store16(s, v);
  float m = s[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, s[i]);
  return m;
}

constexpr int64_t QB = 8;     // query positions a block
constexpr int64_t KW = 32;    // keys a score tile (2 vectors); the block's keys are padded to it
constexpr int SR = ACC16 / 2;  // rows a score tile (8 with AVX-512, 2 with AVX2): its accumulators in registers
constexpr int64_t JV = 64;    // keys a span of the weighted values

template <int NV>
static void chunk_head(const float* q, int64_t q_pos_stride, const float* kh, const float* vh, float* out,
                       int64_t out_pos_stride, int64_t T, int64_t start, int64_t window, int64_t G, float scale,
                       int64_t h0) {
  constexpr int64_t D = 16 * NV;
  constexpr int64_t RP = ACC16 / NV > 0 ? ACC16 / NV : 1;  // rows a PV tile
  const int64_t lo_all = window > 0 ? std::max<int64_t>(0, start - window + 1) : 0;
  const int64_t n_all = start + T - lo_all;
  const int64_t NP = (n_all + 15) / 16 * 16 + KW;
  std::vector<float> kt(D * NP, 0.0f);  // keys transposed: kt[d * NP + j] = key lo_all + j, dim d
  for (int64_t j = 0; j < n_all; ++j)
    for (int64_t d = 0; d < D; ++d) kt[d * NP + j] = kh[(lo_all + j) * D + d];
  const int64_t rows_cap = (G * QB + 7) / 8 * 8;
  std::vector<float> qs(rows_cap * D), s;
  std::vector<float> inverse(rows_cap);
  std::vector<int32_t> lo_of(rows_cap), hi_of(rows_cap);
  std::vector<v16> top(rows_cap);
  std::vector<int32_t> a_of(rows_cap / SR + 1), b_of(rows_cap / SR + 1);  // per row group: the tile's mask bounds
  std::vector<v16> pv((rows_cap + RP) * NV);  // the weighted values' running sums, RP-row groups (padded)
  const i16 lane = lane_index();
  const v16 neg = splat(-std::numeric_limits<float>::infinity()), zero = {};
  for (int64_t i0 = 0; i0 < T; i0 += QB) {
    const int64_t nq = std::min(QB, T - i0), R = G * nq, Rp = (R + 7) / 8 * 8;
    const int64_t blo = window > 0 ? std::max<int64_t>(0, start + i0 - window + 1) : 0, bhi = start + i0 + nq - 1;
    const int64_t offs = blo - lo_all, n = bhi - blo + 1, nv = (n + KW - 1) / KW * KW;
    std::fill(qs.begin(), qs.end(), 0.0f);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t hl = 0; hl < G; ++hl)
        for (int64_t d = 0; d < D; ++d) qs[(i * G + hl) * D + d] = q[(i0 + i) * q_pos_stride + (h0 + hl) * D + d] * scale;
    if ((int64_t)s.size() < Rp * nv) s.resize(Rp * nv);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t p = start + i0 + r / G;
      lo_of[r] = static_cast<int32_t>((window > 0 ? std::max<int64_t>(0, p - window + 1) : 0) - blo);
      hi_of[r] = static_cast<int32_t>(p - blo + 1);
    }
    // scores: SR rows x 32 keys in 2 SR accumulators over d; for each tile of 32 keys (4 KB of kt with
    // D = 32, kept in L1) every row group in turn, so the block's keys leave L2 once, not once a row group.
    // Each row's running max lives in top (masked only in the tiles at the ends of some row's window).
    for (int64_t r = 0; r < Rp; ++r) top[r] = neg;
    for (int64_t r = 0; r < Rp; r += SR) {
      int32_t amax = 0, bmin = std::numeric_limits<int32_t>::max();
      for (int rr = 0; rr < SR && r + rr < R; ++rr) {
        amax = std::max(amax, lo_of[r + rr]);
        bmin = std::min(bmin, hi_of[r + rr]);
      }
      a_of[r / SR] = amax;
      b_of[r / SR] = bmin;
    }
    for (int64_t jj = 0; jj < nv; jj += KW) {
      const float* base = kt.data() + offs + jj;
      for (int64_t r = 0; r < Rp; r += SR) {
        v16 acc[SR][2] = {};
        for (int64_t d = 0; d < D; ++d) {
          const float* kd = base + d * NP;
          const v16 k0 = load16(kd), k1 = load16(kd + 16);
          for (int rr = 0; rr < SR; ++rr) {
            const float qv = qs[(r + rr) * D + d];
            acc[rr][0] += qv * k0; acc[rr][1] += qv * k1;
          }
        }
        for (int rr = 0; rr < SR; ++rr)
          for (int c = 0; c < 2; ++c) store16(s.data() + (r + rr) * nv + jj + 16 * c, acc[rr][c]);
        if (jj >= a_of[r / SR] && jj + KW <= b_of[r / SR]) {  // every row sees the whole tile: no mask
          for (int rr = 0; rr < SR; ++rr) {
            v16 t = top[r + rr];
            t = select(acc[rr][0] > t, acc[rr][0], t);
            top[r + rr] = select(acc[rr][1] > t, acc[rr][1], t);
          }
        } else {
          for (int rr = 0; rr < SR; ++rr) {
            if (r + rr >= R) continue;
            const int32_t a = lo_of[r + rr], b = hi_of[r + rr];
            if (jj + KW > a && jj < b) {
              v16 t = top[r + rr];
              for (int c = 0; c < 2; ++c) {
                const i16 idx = lane + static_cast<int32_t>(jj + 16 * c);
                t = select((idx >= a) & (idx < b) & (acc[rr][c] > t), acc[rr][c], t);
              }
              top[r + rr] = t;
            }
          }
        }
      }
    }
    // softmax of each row over its own keys, its max taken with the scores (the rest of the block's range weighs 0)
    for (int64_t r = 0; r < R; ++r) {
      const int32_t a = lo_of[r], b = hi_of[r];
      float* row = s.data() + r * nv;
      const float m = hmax(top[r]);
      v16 total = {};
      const int64_t ja = a / 16 * 16, jb = (b + 15) / 16 * 16;
      for (int64_t j = 0; j < ja; j += 16) store16(row + j, zero);
      for (int64_t j = jb; j < nv; j += 16) store16(row + j, zero);
      for (int64_t j = ja; j < jb; j += 16) {
        v16 e = exp_nonpositive(load16(row + j) - m);
        if (j < a || j + 16 > b) {  // a vector at an end of the row's window: the keys outside it weigh 0
          const i16 idx = lane + static_cast<int32_t>(j);
          e = select((idx >= a) & (idx < b), e, zero);
        }
        store16(row + j, e);
        total += e;
      }
      inverse[r] = 1.0f / hsum(total);
    }
    // weighted values: RP rows x D in accumulators over the block's keys, JV keys at a time (8 KB of values
    // with D = 32, kept in L1) for every row group in turn; each group's sums wait in pv between the spans,
    // so every lane adds its keys in the same order as in one pass
    const float* vb = vh + blo * D;
    for (int64_t j0 = 0; j0 < n; j0 += JV) {
      const int64_t j1 = std::min(n, j0 + JV);
      for (int64_t r = 0; r < R; r += RP) {
        v16 acc[RP][NV];
        for (int rr = 0; rr < RP; ++rr)
          for (int c = 0; c < NV; ++c) acc[rr][c] = j0 == 0 ? zero : pv[(r + rr) * NV + c];
        for (int64_t j = j0; j < j1; ++j) {
          v16 vv[NV];
          for (int c = 0; c < NV; ++c) vv[c] = load16(vb + j * D + 16 * c);
          for (int rr = 0; rr < RP; ++rr) {
            const float w = s[(r + rr) * nv + j];
            for (int c = 0; c < NV; ++c) acc[rr][c] += w * vv[c];
          }
        }
        for (int rr = 0; rr < RP; ++rr)
          for (int c = 0; c < NV; ++c) pv[(r + rr) * NV + c] = acc[rr][c];
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r / G, hl = r % G;
      float* o = out + i * out_pos_stride + (h0 + hl) * D;
      for (int c = 0; c < NV; ++c) store16(o + 16 * c, pv[r * NV + c] * inverse[r]);
    }
  }
}

// q [T, H, D]; keys, values [Hkv, L, D] (a slot's cache, rows of D contiguous), L >= start + T -> [T, H, D]
torch::Tensor chunk_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, int64_t start, int64_t window) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && keys.scalar_type() == torch::kFloat32 &&
              values.scalar_type() == torch::kFloat32, "chunk_attention: float32 only");
  q = q.contiguous();
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2), Hkv = keys.size(0), G = H / Hkv;
  TORCH_CHECK(keys.stride(2) == 1 && keys.stride(1) == D && values.stride(2) == 1 && values.stride(1) == D,
              "chunk_attention: key and value rows must be contiguous");
  TORCH_CHECK(keys.size(1) >= start + T, "chunk_attention: the keys end before the chunk");
  auto out = torch::empty_like(q);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t g = 0; g < Hkv; ++g) {
    const float* kh = keys.data_ptr<float>() + g * keys.stride(0);
    const float* vh = values.data_ptr<float>() + g * values.stride(0);
    switch (D) {
      case 32: chunk_head<2>(q.data_ptr<float>(), H * D, kh, vh, out.data_ptr<float>(), H * D, T, start, window, G, scale, g * G); break;
      case 64: chunk_head<4>(q.data_ptr<float>(), H * D, kh, vh, out.data_ptr<float>(), H * D, T, start, window, G, scale, g * G); break;
      case 128: chunk_head<8>(q.data_ptr<float>(), H * D, kh, vh, out.data_ptr<float>(), H * D, T, start, window, G, scale, g * G); break;
      default: TORCH_CHECK(false, "chunk_attention: head width ", D, " is not 32, 64 or 128");
    }
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("chunk_attention", &chunk_attention, pybind11::call_guard<pybind11::gil_scoped_release>());
}
