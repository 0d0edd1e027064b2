
// Follows native_build.PREAMBLE: the includes.
// A quantized KV cache's codec (model/kv_format.py, q8 and k8v4), bit for bit the Python one: `encode` stores a
// row's consecutive positions, `decode` rebuilds a slot's positions [low, high) as float32. The arithmetic is
// torch's, one rounding an operation: every quotient a float32 division, torch.round's half to even (nearbyint
// in the default rounding mode), and a 4-bit value's `q * scale + min` a product rounded, then a sum rounded:
// no FMA contraction here (g++ contracts by default for C++, even with -std=c++17), at every -march.
namespace {
struct Cache {  // one layer's parts (LayerKV.parts), [slots, heads, ctx, ...]: the values are 4-bit where v is uint8
  int8_t* k;
  float* k_scale;
  uint8_t* v;
  float* v_scale;
  float* v_min;
  bool four_bit;
  int64_t slots, heads, ctx, dim, value_bytes;
};

Cache cache_of(const torch::Tensor& k, const torch::Tensor& k_scale, const torch::Tensor& v,
               const torch::Tensor& v_scale, const torch::Tensor& v_min, const char* op) {
  const bool four_bit = v.scalar_type() == torch::kUInt8;
  TORCH_CHECK(k.scalar_type() == torch::kInt8 && (four_bit || v.scalar_type() == torch::kInt8) &&
                  k_scale.scalar_type() == torch::kFloat32 && v_scale.scalar_type() == torch::kFloat32,
              op, ": int8 keys, int8 or 4-bit values, float32 scales");
  TORCH_CHECK(k.device().is_cpu() && k.dim() == 4 && k.is_contiguous() && v.is_contiguous() &&
                  k_scale.is_contiguous() && v_scale.is_contiguous(), op, ": contiguous CPU caches only");
  const int64_t slots = k.size(0), heads = k.size(1), ctx = k.size(2), dim = k.size(3);
  const int64_t value_bytes = four_bit ? dim / 2 : dim;
  TORCH_CHECK(k_scale.numel() == slots * heads * ctx && v_scale.numel() == k_scale.numel() &&
                  v.numel() == k_scale.numel() * value_bytes && (!four_bit || dim % 2 == 0),
              op, ": parts of one [slots, heads, ctx, head_dim] layer");
  TORCH_CHECK(!four_bit || (v_min.scalar_type() == torch::kFloat32 && v_min.is_contiguous() &&
                            v_min.numel() == v_scale.numel()), op, ": 4-bit values need v_min");
  return {k.data_ptr<int8_t>(), k_scale.data_ptr<float>(), static_cast<uint8_t*>(v.data_ptr()),
          v_scale.data_ptr<float>(), four_bit ? v_min.data_ptr<float>() : nullptr, four_bit,
          slots, heads, ctx, dim, value_bytes};
}
}  // namespace

// The arithmetic, torch-free: D the head width when compiled (0: c.dim at run time), so the common widths unroll.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

// round(r) clamped to [lo, hi], as torch's round_().clamp_(): nearbyint rounds half to even (the default
// rounding mode); clamped as an integer, which is exact, since |r| stays far below 2^31 (at most ~2 x 127: a
// scale that underflowed to a subnormal keeps few bits).
static inline int32_t clamp_level(float r, int32_t lo, int32_t hi) {
  return std::min(std::max(static_cast<int32_t>(std::nearbyint(r)), lo), hi);
}

// One head's values x -> q8: scale = absmax / 127, q = round(x / scale) clamped to +-127 (a zero scale divides
// by 1). The max of |x| is exact whatever the order.
template <int D>
static inline void encode_q8(const float* x, int64_t dim, int8_t* q, float* scale) {
  const int64_t n = D ? D : dim;
  float top = 0.0f;
#pragma omp simd reduction(max : top)
  for (int64_t d = 0; d < n; ++d) top = std::max(top, std::fabs(x[d]));
  *scale = top / 127.0f;
  const float by = *scale > 0.0f ? *scale : 1.0f;
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) q[d] = static_cast<int8_t>(clamp_level(x[d] / by, -127, 127));
}

// -> 4-bit: min and scale = (max - min) / 15, q = round((x - min) / scale) clamped to 0..15, element 2i in the
// low nibble of byte i, 2i + 1 in the high one. `level` holds dim bytes. (A row whose least value is a zero of
// either sign may keep the other sign's min than torch's reduction does: no other value differs.)
template <int D>
static inline void encode_q4(const float* x, int64_t dim, uint8_t* q, float* scale, float* low, uint8_t* level) {
  const int64_t n = D ? D : dim;
  float lo = x[0], hi = x[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int64_t d = 1; d < n; ++d) lo = std::min(lo, x[d]), hi = std::max(hi, x[d]);
  *scale = (hi - lo) / 15.0f, *low = lo;
  const float by = *scale > 0.0f ? *scale : 1.0f;
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) level[d] = static_cast<uint8_t>(clamp_level((x[d] - lo) / by, 0, 15));
  for (int64_t i = 0; i < n / 2; ++i) q[i] = level[2 * i] | (level[2 * i + 1] << 4);
}

template <int D>
static inline void decode_q8(const int8_t* q, float scale, int64_t dim, float* out) {
  const int64_t n = D ? D : dim;
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) out[d] = static_cast<float>(q[d]) * scale;
}

template <int D>
static inline void decode_q4(const uint8_t* q, float scale, float low, int64_t dim, float* out) {
  const int64_t n = D ? D : dim;
#pragma omp simd
  for (int64_t i = 0; i < n / 2; ++i) {
    const float a = static_cast<float>(q[i] & 15) * scale, b = static_cast<float>(q[i] >> 4) * scale;
    out[2 * i] = a + low, out[2 * i + 1] = b + low;
  }
}

// Rows t of kx, vx (row t, head h at t * s0 + h * s1) -> the slot's positions first + t, every head.
template <int D>
static void store_rows(const Cache& c, const float* kx, const float* vx, int64_t s0, int64_t s1, int64_t slot,
                       int64_t first, int64_t tokens, uint8_t* level) {
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t at = (slot * c.heads + h) * c.ctx + first + t, from = t * s0 + h * s1;
      encode_q8<D>(kx + from, c.dim, c.k + at * c.dim, c.k_scale + at);
      if (c.four_bit)
        encode_q4<D>(vx + from, c.dim, c.v + at * c.value_bytes, c.v_scale + at, c.v_min + at, level);
      else
        encode_q8<D>(vx + from, c.dim, reinterpret_cast<int8_t*>(c.v + at * c.value_bytes), c.v_scale + at);
    }
}

// The slot's positions low..low+n-1 -> ko, vo [heads, n, dim].
template <int D>
static void load_rows(const Cache& c, int64_t slot, int64_t low, int64_t n, float* ko, float* vo) {
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = (slot * c.heads + h) * c.ctx + low + j, to = (h * n + j) * c.dim;
      decode_q8<D>(c.k + at * c.dim, c.k_scale[at], c.dim, ko + to);
      if (c.four_bit)
        decode_q4<D>(c.v + at * c.value_bytes, c.v_scale[at], c.v_min[at], c.dim, vo + to);
      else
        decode_q8<D>(reinterpret_cast<const int8_t*>(c.v + at * c.value_bytes), c.v_scale[at], c.dim, vo + to);
    }
}

static void store_any(const Cache& c, const float* kx, const float* vx, int64_t s0, int64_t s1, int64_t slot,
                      int64_t first, int64_t tokens, uint8_t* level) {
  switch (c.dim) {
    case 32: return store_rows<32>(c, kx, vx, s0, s1, slot, first, tokens, level);
    case 64: return store_rows<64>(c, kx, vx, s0, s1, slot, first, tokens, level);
    case 128: return store_rows<128>(c, kx, vx, s0, s1, slot, first, tokens, level);
    default: return store_rows<0>(c, kx, vx, s0, s1, slot, first, tokens, level);
  }
}

static void load_any(const Cache& c, int64_t slot, int64_t low, int64_t n, float* ko, float* vo) {
  switch (c.dim) {
    case 32: return load_rows<32>(c, slot, low, n, ko, vo);
    case 64: return load_rows<64>(c, slot, low, n, ko, vo);
    case 128: return load_rows<128>(c, slot, low, n, ko, vo);
    default: return load_rows<0>(c, slot, low, n, ko, vo);
  }
}
#pragma GCC pop_options

// k_new, v_new float32 [T, Hkv, hd] (any strides but a contiguous head_dim): stored at the slot's positions
// first..first+T-1 of the parts, as KVFormat.encode stores them.
void encode(torch::Tensor k_new, torch::Tensor v_new, torch::Tensor k, torch::Tensor k_scale, torch::Tensor v,
            torch::Tensor v_scale, torch::Tensor v_min, int64_t slot, int64_t first) {
  const Cache c = cache_of(k, k_scale, v, v_scale, v_min, "kv_codec.encode");
  TORCH_CHECK(k_new.scalar_type() == torch::kFloat32 && v_new.scalar_type() == torch::kFloat32 &&
                  k_new.dim() == 3 && k_new.size(1) == c.heads && k_new.size(2) == c.dim &&
                  v_new.sizes() == k_new.sizes(), "kv_codec.encode: float32 keys and values [T, kv heads, head_dim]");
  if (k_new.stride(2) != 1) k_new = k_new.contiguous();
  if (v_new.stride(2) != 1) v_new = v_new.contiguous();
  const int64_t tokens = k_new.size(0);
  TORCH_CHECK(slot >= 0 && slot < c.slots && first >= 0 && first + tokens <= c.ctx,
              "kv_codec.encode: slot ", slot, " positions [", first, ", ", first + tokens, ") outside the cache");
  if (v_new.strides() != k_new.strides()) v_new = v_new.contiguous(), k_new = k_new.contiguous();
  std::vector<uint8_t> level(c.dim);
  store_any(c, k_new.data_ptr<float>(), v_new.data_ptr<float>(), k_new.stride(0), k_new.stride(1), slot, first,
            tokens, level.data());
}

// The slot's positions [low, high) -> float32 keys and values [1, Hkv, high - low, hd], as KVFormat.decode
// rebuilds them.
std::tuple<torch::Tensor, torch::Tensor> decode(torch::Tensor k, torch::Tensor k_scale, torch::Tensor v,
                                                torch::Tensor v_scale, torch::Tensor v_min, int64_t slot, int64_t low,
                                                int64_t high) {
  const Cache c = cache_of(k, k_scale, v, v_scale, v_min, "kv_codec.decode");
  TORCH_CHECK(slot >= 0 && slot < c.slots && low >= 0 && low <= high && high <= c.ctx,
              "kv_codec.decode: slot ", slot, " positions [", low, ", ", high, ") outside the cache");
  const int64_t n = high - low;
  auto keys = torch::empty({1, c.heads, n, c.dim}, torch::kFloat32);
  auto values = torch::empty({1, c.heads, n, c.dim}, torch::kFloat32);
  load_any(c, slot, low, n, keys.data_ptr<float>(), values.data_ptr<float>());
  return {keys, values};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("encode", &encode, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("decode", &decode, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.attr("kv_codec") = pybind11::make_tuple(m.attr("encode"), m.attr("decode"));  // what build.native_op returns
}
