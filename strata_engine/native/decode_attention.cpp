
// Follows native_build.PREAMBLE: the includes, v16 and exp_nonpositive.
// One (row, head): scores over its keys, a max-subtracted softmax and the weighted sum of values, in a fixed
// order. D > 0: the head width known when compiled (0: `dim` at run time).
template <int D>
static void attend_head(const float* qh, const float* kh, const float* vh, int64_t keys, int64_t dim, float scale,
                        float* w, float* oh) {
  const int64_t width = D > 0 ? D : dim;
  for (int64_t j = 0; j < keys; ++j) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < width; ++d) dot += qh[d] * kh[j * width + d];
    w[j] = dot * scale;
  }
  float top = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < keys; ++j) top = std::max(top, w[j]);
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < keys; ++j) {
    w[j] = exp_nonpositive(w[j] - top);
    total += w[j];
  }
  const float inverse = 1.0f / total;
  if (D == 0 && width > 64) {  // a run-time width past the local buffers: accumulate in place
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t d = 0; d < width; ++d) oh[d] += w[j] * vh[j * width + d];
    for (int64_t d = 0; d < width; ++d) oh[d] *= inverse;
    return;
  }
  // Four keys at a time into four sums, so each key's multiply-adds need not wait for the previous key's.
  constexpr int64_t cap = D > 0 ? D : 64;
  float acc[4][cap] = {};
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    for (int64_t u = 0; u < 4; ++u) {
      const float wj = w[j + u];
      const float* vj = vh + (j + u) * width;
#pragma omp simd
      for (int64_t d = 0; d < width; ++d) acc[u][d] += wj * vj[d];
    }
  }
  for (; j < keys; ++j) {
#pragma omp simd
    for (int64_t d = 0; d < width; ++d) acc[0][d] += w[j] * vh[j * width + d];
  }
#pragma omp simd
  for (int64_t d = 0; d < width; ++d) oh[d] = ((acc[0][d] + acc[1][d]) + (acc[2][d] + acc[3][d])) * inverse;
}

torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor k_cache,
                               torch::Tensor v_cache, torch::Tensor slots, torch::Tensor positions, int64_t window) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
              v_cache.scalar_type() == torch::kFloat32, "decode_attention: float32 only");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "decode_attention: contiguous caches only");
  q = q.contiguous(); k = k.contiguous().to(torch::kFloat32); v = v.contiguous().to(torch::kFloat32);
  auto slot_of = slots.to(torch::kLong).contiguous(), position_of = positions.to(torch::kLong).contiguous();
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k_cache.size(1), ctx = k_cache.size(2), group = heads / kv_heads;
  const int64_t* s_ptr = slot_of.data_ptr<int64_t>();
  const int64_t* p_ptr = position_of.data_ptr<int64_t>();
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  auto out = torch::zeros_like(q);
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {  // every write before any read, as the per-row op does
    const int64_t s = s_ptr[i], p = p_ptr[i];
    if (s < 0) continue;
    TORCH_CHECK(p >= 0 && p < ctx, "decode_attention: position ", p, " outside the cache's ", ctx);
    for (int64_t g = 0; g < kv_heads; ++g) {
      std::copy_n(kp + (i * kv_heads + g) * dim, dim, kc + ((s * kv_heads + g) * ctx + p) * dim);
      std::copy_n(vp + (i * kv_heads + g) * dim, dim, vc + ((s * kv_heads + g) * ctx + p) * dim);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> weights;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t s = s_ptr[i], p = p_ptr[i];
    if (s < 0) continue;
    const int64_t low = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0, keys = p - low + 1;
    weights.resize(keys);
    float* w = weights.data();
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      const float* qh = qp + (i * heads + h) * dim;
      const float* kh = kc + ((s * kv_heads + g) * ctx + low) * dim;
      const float* vh = vc + ((s * kv_heads + g) * ctx + low) * dim;
      float* oh = op + (i * heads + h) * dim;
      switch (dim) {  // a known width unrolls: the query and the output stay in registers
        case 32: attend_head<32>(qh, kh, vh, keys, 32, scale, w, oh); break;
        case 64: attend_head<64>(qh, kh, vh, keys, 64, scale, w, oh); break;
        case 128: attend_head<128>(qh, kh, vh, keys, 128, scale, w, oh); break;
        default: attend_head<0>(qh, kh, vh, keys, dim, scale, w, oh);
      }
    }
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention, pybind11::call_guard<pybind11::gil_scoped_release>());
}
