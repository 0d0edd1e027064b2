
// Follows native_build.PREAMBLE: the includes, v16 (load16, store16) and exp_nonpositive.
// One (row, head) over a quantized cache's keys [low, high): int8 keys widened to float inside the dot products
// (times each key's scale after), a max-subtracted softmax, and the values (int8 times a scale, or 4-bit times
// a scale plus a min) widened inside the weighted sum; nothing of the window is copied to float. A fixed order
// throughout, so a row's result depends on its own query and keys only.
#if defined(__AVX512F__) || defined(__AVX2__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsics headers: their _mm512_undefined_*
#include <immintrin.h>
#endif

// The softmax's exp, called where 16 lanes are two registers (x86-64-v3): preamble.h inlines it there, and
// inlined into this op GCC contracted its arithmetic otherwise than at v4, so q8's rows came out in other bits
// at v3 than at v4 (kept apart they agree, as SERVER.md says); ~15% of this op's time at v3 is the cost.
template <typename F>
#if defined(LANES_ARE_TWO_REGISTERS)
__attribute__((noinline))
#endif
static inline F softmax_exp(F x) {
  return exp_nonpositive(x);
}

// 16 stored bytes as 16 float lanes, exactly: the ISA's widening where the target has it (GCC turns a vector
// extension's int8 -> int32 conversion into scalar code), a loop elsewhere. `nibbles`: the 16 bytes' low
// nibbles to `v`, high nibbles to `high`.
template <bool SIGNED, bool NIBBLES = false>
static inline void widen16(const void* p, v16& v, v16* high = nullptr) {
#if defined(__AVX512F__)
  const __m128i b = _mm_loadu_si128(static_cast<const __m128i*>(p));
  const __m512i i = SIGNED ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
  const __m512 lo = _mm512_cvtepi32_ps(NIBBLES ? _mm512_and_si512(i, _mm512_set1_epi32(15)) : i);
  std::memcpy(&v, &lo, sizeof v);
  if (NIBBLES) {
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(i, 4));
    std::memcpy(high, &hi, sizeof hi);
  }
#elif defined(__AVX2__)
  for (int h = 0; h < 2; ++h) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + 8 * h));
    const __m256i i = SIGNED ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    const __m256 lo = _mm256_cvtepi32_ps(NIBBLES ? _mm256_and_si256(i, _mm256_set1_epi32(15)) : i);
    std::memcpy(reinterpret_cast<float*>(&v) + 8 * h, &lo, sizeof lo);
    if (NIBBLES) {
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(i, 4));
      std::memcpy(reinterpret_cast<float*>(high) + 8 * h, &hi, sizeof hi);
    }
  }
#else
  float lo[16], hi[16];
  for (int l = 0; l < 16; ++l) {
    const int32_t b = SIGNED ? static_cast<const int8_t*>(p)[l] : static_cast<const uint8_t*>(p)[l];
    lo[l] = static_cast<float>(NIBBLES ? b & 15 : b), hi[l] = static_cast<float>(b >> 4);
  }
  v = load16(lo);
  if (NIBBLES) *high = load16(hi);
#endif
}

static inline vpart pair_sums(vpart a, vpart b) {  // lanes: a's adjacent lanes summed in pairs, then b's
  ipart even, odd;
  for (int l = 0; l < LANES; ++l) even[l] = 2 * l, odd[l] = 2 * l + 1;
  return __builtin_shuffle(a, b, even) + __builtin_shuffle(a, b, odd);
}

// A key's 16 products -> one vpart of their first sums up the tree of adjacent pairs (the parts folded while
// there are more than one), so every width sums a key's lanes in the same order.
static inline vpart fold_parts(v16 p) {
  for (int n = PARTS; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i) p.p[i] = pair_sums(p.p[2 * i], p.p[2 * i + 1]);
  return p.p[0];
}

// x[0..LANES): one key's folded products each -> lane u holds the sum of x[u]'s lanes: the rest of the tree of
// adjacent pairs, the same for a key wherever it sits in the block, with no horizontal sum a key.
static inline vpart sums_of(vpart* x) {
  for (int n = LANES; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i) x[i] = pair_sums(x[2 * i], x[2 * i + 1]);
  return x[0];
}

static inline float hsum(v16 v) {  // a fixed tree, as chunk_attention.cpp's
  float s[16];
  store16(s, v);
  for (int w = 8; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  return s[0];
}

// D: the head width (32, 64 or 128: the wrapper passes no other).
template <int D, bool FOUR_BIT>
static void attend_head(const float* qh, const int8_t* kh, const float* ks, const uint8_t* vh, const float* vs,
                        const float* vm, int64_t keys, float scale, float* w, float* oh) {
  constexpr int N = D / 16, M = FOUR_BIT ? N / 2 : N;  // v16s a key takes; a value's bytes take
  v16 qv[N];
  for (int n = 0; n < N; ++n) qv[n] = load16(qh + 16 * n);
  for (int64_t j0 = 0; j0 < keys; j0 += LANES) {  // LANES keys a block (the last block repeats its last key)
    const int64_t count = std::min<int64_t>(LANES, keys - j0);
    vpart x[LANES];
    for (int u = 0; u < LANES; ++u) {
      const int8_t* kj = kh + (j0 + std::min<int64_t>(u, count - 1)) * D;
      v16 k, p;
      widen16<true>(kj, k);
      p = qv[0] * k;
      for (int n = 1; n < N; ++n) widen16<true>(kj + 16 * n, k), p += qv[n] * k;
      x[u] = fold_parts(p);
    }
    const vpart s = sums_of(x);
    for (int u = 0; u < count; ++u) w[j0 + u] = s[u] * ks[j0 + u] * scale;
  }
  float top = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < keys; ++j) top = std::max(top, w[j]);
  v16 sums = splat(0.0f);  // 16 lanes whatever the width, then a fixed tree: the same total at every level
  int64_t e = 0;
  for (; e + 16 <= keys; e += 16) {
    const v16 x = softmax_exp(load16(w + e) - top);
    store16(w + e, x);
    sums += x;
  }
  float total = hsum(sums);
  for (; e < keys; ++e) {
    w[e] = softmax_exp(w[e] - top);
    total += w[e];
  }
  const float inverse = 1.0f / total;
  // Each key's weight times its value scale multiplies the stored integers; a 4-bit key's min times its weight
  // adds to every element (summed apart), and a byte's low and high nibbles (elements 2i and 2i+1) go to sums
  // of their own, interleaved once at the end. Four keys at a time into four sums, so each key's multiply-adds
  // need not wait for the previous key's.
  v16 acc[4][2][M] = {};
  float shift = 0.0f;
  auto add = [&](v16 (&a)[2][M], int64_t j) {
    const float wj = w[j] * vs[j];
    for (int n = 0; n < M; ++n) {
      v16 lo, hi;
      if constexpr (FOUR_BIT) {
        widen16<false, true>(vh + j * (D / 2) + 16 * n, lo, &hi);
        a[1][n] += wj * hi;
      } else {
        widen16<true>(vh + j * D + 16 * n, lo);
      }
      a[0][n] += wj * lo;
    }
    if constexpr (FOUR_BIT) shift += w[j] * vm[j];
  };
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4)
    for (int u = 0; u < 4; ++u) add(acc[u], j + u);
  for (; j < keys; ++j) add(acc[0], j);
  for (int h = 0; h < (FOUR_BIT ? 2 : 1); ++h)
    for (int n = 0; n < M; ++n) {
      float s[16];
      store16(s, (acc[0][h][n] + acc[1][h][n]) + (acc[2][h][n] + acc[3][h][n]));
      for (int l = 0; l < 16; ++l) {
        if constexpr (FOUR_BIT)
          oh[2 * (16 * n + l) + h] = (s[l] + shift) * inverse;
        else
          oh[16 * n + l] = s[l] * inverse;
      }
    }
}

template <int D>
static void attend_head_as(bool four_bit, const float* qh, const int8_t* kh, const float* ks, const uint8_t* vh,
                           const float* vs, const float* vm, int64_t keys, float scale, float* w, float* oh) {
  if (four_bit)
    attend_head<D, true>(qh, kh, ks, vh, vs, vm, keys, scale, w, oh);
  else
    attend_head<D, false>(qh, kh, ks, vh, vs, vm, keys, scale, w, oh);
}

// One head's new key or value x [D] stored as model/kv_format.py's encode stores it, bit for bit: q8 =
// round(x / (absmax / 127)) clamped to +-127; 4-bit = round((x - min) / ((max - min) / 15)) clamped to 0..15,
// two a byte (element 2i low); a zero scale divides by 1; rounding half to even as torch.round.
static void store_q8(const float* x, int64_t dim, int8_t* q, float* scale) {
  float top = 0.0f;
  for (int64_t d = 0; d < dim; ++d) top = std::max(top, std::fabs(x[d]));
  *scale = top / 127.0f;
  const float by = *scale > 0.0f ? *scale : 1.0f;
  for (int64_t d = 0; d < dim; ++d) q[d] = static_cast<int8_t>(std::clamp(std::nearbyint(x[d] / by), -127.0f, 127.0f));
}
static void store_q4(const float* x, int64_t dim, uint8_t* q, float* scale, float* low) {
  float lo = x[0], hi = x[0];
  for (int64_t d = 1; d < dim; ++d) lo = std::min(lo, x[d]), hi = std::max(hi, x[d]);
  *scale = (hi - lo) / 15.0f, *low = lo;
  const float by = *scale > 0.0f ? *scale : 1.0f;
  auto level = [&](float e) { return static_cast<uint8_t>(std::clamp(std::nearbyint((e - lo) / by), 0.0f, 15.0f)); };
  for (int64_t d = 0; d < dim / 2; ++d) q[d] = level(x[2 * d]) | (level(x[2 * d + 1]) << 4);
}

// q [R, H, D] float32 and the rows' new keys and values k_new, v_new [R, Hkv, D]; k int8 [S, Hkv, ctx, D] and
// k_scale [S, Hkv, ctx]; v int8 [S, Hkv, ctx, D] (q8) or uint8 [S, Hkv, ctx, D/2] (4-bit), v_scale [S, Hkv,
// ctx], v_min the same (4-bit only; empty for q8); per row its slot and key range [low, high). Every row's new
// key and value is stored at high - 1 first, then each row attends -> [R, H, D].
torch::Tensor quant_decode_attention(torch::Tensor q, torch::Tensor k_new, torch::Tensor v_new, torch::Tensor k,
                                     torch::Tensor k_scale, torch::Tensor v,
                                     torch::Tensor v_scale, torch::Tensor v_min, std::vector<int64_t> slots,
                                     std::vector<int64_t> lows, std::vector<int64_t> highs) {
  const bool four_bit = v.scalar_type() == torch::kUInt8;
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k.scalar_type() == torch::kInt8 &&
              (four_bit || v.scalar_type() == torch::kInt8) && k_scale.scalar_type() == torch::kFloat32 &&
              v_scale.scalar_type() == torch::kFloat32, "quant_decode_attention: int8 keys, int8 or 4-bit values");
  TORCH_CHECK(k.is_contiguous() && v.is_contiguous() && k_scale.is_contiguous() && v_scale.is_contiguous(),
              "quant_decode_attention: contiguous caches only");
  TORCH_CHECK(!four_bit || (v_min.scalar_type() == torch::kFloat32 && v_min.is_contiguous() &&
                            v_min.numel() == v_scale.numel()), "quant_decode_attention: 4-bit values need v_min");
  q = q.contiguous();
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == rows && lows.size() == slots.size() && highs.size() == slots.size(),
              "quant_decode_attention: one slot, low and high a row");
  const int64_t num_slots = k.size(0), kv_heads = k.size(1), ctx = k.size(2), group = heads / kv_heads;
  TORCH_CHECK(k.size(3) == dim && (dim == 32 || dim == 64 || dim == 128) && heads % kv_heads == 0,
              "quant_decode_attention: head_dim 32, 64 or 128, heads a multiple of kv heads");
  const int64_t value_bytes = four_bit ? dim / 2 : dim;
  TORCH_CHECK(v.size(3) == value_bytes, "quant_decode_attention: values of ", v.size(3), " bytes, not ", value_bytes);
  TORCH_CHECK(k_new.scalar_type() == torch::kFloat32 && v_new.scalar_type() == torch::kFloat32 &&
              k_new.size(0) == rows && k_new.size(1) == kv_heads && k_new.size(2) == dim && v_new.sizes() == k_new.sizes(),
              "quant_decode_attention: float32 new keys and values [rows, kv heads, head_dim]");
  k_new = k_new.contiguous(), v_new = v_new.contiguous();
  int8_t* kp = k.data_ptr<int8_t>();
  uint8_t* vp = static_cast<uint8_t*>(v.data_ptr());
  float* ksp = k_scale.data_ptr<float>();
  float* vsp = v_scale.data_ptr<float>();
  float* vmp = four_bit ? v_min.data_ptr<float>() : nullptr;
  for (int64_t i = 0; i < rows; ++i) {  // every write before any read, as the model's rows are written
    const int64_t s = slots[i], low = lows[i], high = highs[i];
    TORCH_CHECK(s >= 0 && s < num_slots && low >= 0 && low < high && high <= ctx,
                "quant_decode_attention: slot ", s, " keys [", low, ", ", high, ") outside the cache");
    for (int64_t g = 0; g < kv_heads; ++g) {
      const int64_t at = (s * kv_heads + g) * ctx + high - 1;
      const float* kx = k_new.data_ptr<float>() + (i * kv_heads + g) * dim;
      const float* vx = v_new.data_ptr<float>() + (i * kv_heads + g) * dim;
      store_q8(kx, dim, kp + at * dim, ksp + at);
      if (four_bit)
        store_q4(vx, dim, vp + at * value_bytes, vsp + at, vmp + at);
      else
        store_q8(vx, dim, reinterpret_cast<int8_t*>(vp + at * value_bytes), vsp + at);
    }
  }
  const float* qp = q.data_ptr<float>();
  auto out = torch::empty_like(q);
  float* op = out.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> weights;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t s = slots[i], low = lows[i], keys = highs[i] - low;
    weights.resize(keys);
    float* w = weights.data();
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = (s * kv_heads + h / group) * ctx + low;  // the kv head's first key in the window
      const float* qh = qp + (i * heads + h) * dim;
      const int8_t* kh = kp + at * dim;
      const uint8_t* vh = vp + at * value_bytes;
      const float* vm = four_bit ? vmp + at : nullptr;
      float* oh = op + (i * heads + h) * dim;
      switch (dim) {  // a known width unrolls: the query and the sums stay in registers
        case 32: attend_head_as<32>(four_bit, qh, kh, ksp + at, vh, vsp + at, vm, keys, scale, w, oh); break;
        case 64: attend_head_as<64>(four_bit, qh, kh, ksp + at, vh, vsp + at, vm, keys, scale, w, oh); break;
        default: attend_head_as<128>(four_bit, qh, kh, ksp + at, vh, vsp + at, vm, keys, scale, w, oh);
      }
    }
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("quant_decode_attention", &quant_decode_attention, pybind11::call_guard<pybind11::gil_scoped_release>());
}
