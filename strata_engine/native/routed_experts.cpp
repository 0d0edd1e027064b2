
// Follows native_build.PREAMBLE: the includes.
// x [N, D]; weights, experts [n, k] (n <= N); gate_up [E, 2I, D]; down [E, D, I] -> [N, D]
torch::Tensor routed_experts(torch::Tensor x, torch::Tensor weights, torch::Tensor experts, torch::Tensor gate_up,
                             torch::Tensor down, int64_t row_tile) {
  TORCH_CHECK(x.dim() == 2 && experts.dim() == 2 && weights.sizes() == experts.sizes(),
              "routed_experts: x [N, D], weights and experts [n, k]");
  TORCH_CHECK(x.device().is_cpu() && experts.device().is_cpu(), "routed_experts: CPU tensors only");
  TORCH_CHECK(experts.size(0) <= x.size(0), "routed_experts: more routed rows than rows");
  TORCH_CHECK(row_tile >= 1, "routed_experts: row_tile must be >= 1");
  const int64_t pairs = experts.numel(), top_k = experts.size(1), count_of_experts = gate_up.size(0);
  auto expert_of = experts.to(torch::kLong).contiguous();
  const int64_t* ep = expert_of.data_ptr<int64_t>();
  // Group the (row, choice) pairs by expert, stably: within an expert, rows in ascending order.
  std::vector<int64_t> counts(count_of_experts + 1, 0);
  for (int64_t i = 0; i < pairs; ++i) {
    TORCH_CHECK(ep[i] >= 0 && ep[i] < count_of_experts, "routed_experts: expert id ", ep[i], " out of range");
    ++counts[ep[i] + 1];
  }
  for (int64_t e = 0; e < count_of_experts; ++e) counts[e + 1] += counts[e];  // counts[e] = first pair of e
  std::vector<int64_t> order(pairs), next(counts.begin(), counts.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) order[next[ep[i]]++] = i;
  auto pair_order = torch::from_blob(order.data(), {pairs}, torch::kLong);
  auto rows_of = at::floor_divide(pair_order, top_k);                    // the row of each sorted pair
  auto weights_of = weights.reshape({pairs}).index_select(0, pair_order);  // and its router weight
  auto out = torch::zeros_like(x);
  for (int64_t e = 0; e < count_of_experts; ++e) {
    const int64_t first = counts[e], count = counts[e + 1] - first;
    if (count == 0) continue;
    auto rows = rows_of.narrow(0, first, count);
    auto input = x.index_select(0, rows);
    const int64_t extra = (row_tile - count % row_tile) % row_tile;  // zero rows up to the tile
    if (extra) input = at::cat({input, input.new_zeros({extra, x.size(1)})});
    auto gate_and_up = at::linear(input, gate_up[e]).chunk(2, -1);
    auto y = at::linear(at::silu(gate_and_up[0]) * gate_and_up[1], down[e]).narrow(0, 0, count) *
             weights_of.narrow(0, first, count).unsqueeze(1);
    out.index_add_(0, rows, y);
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("routed_experts", &routed_experts, pybind11::call_guard<pybind11::gil_scoped_release>());
}
