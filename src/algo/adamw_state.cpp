// AdamW state by parameter; see adamw_state.hpp.
#include "algo/adamw_state.hpp"

#include <torch/torch.h>

#include <string>
#include <type_traits>

namespace sao::algo {

namespace {
// The optimizer's key for `param`, whichever LibTorch this is built against.
template <typename Map>
typename Map::key_type state_key(const Map& /*state*/, const torch::Tensor& param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    return c10::guts::to_string(param.unsafeGetTensorImpl());
  } else {
    return param.unsafeGetTensorImpl();
  }
}
}  // namespace

torch::optim::AdamWParamState* adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& param) {
  auto& state = optimizer.state();
  const auto it = state.find(state_key(state, param));
  if (it == state.end()) return nullptr;
  return static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

void put_adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& param,
                     std::unique_ptr<torch::optim::AdamWParamState> state) {
  auto& states = optimizer.state();
  states[state_key(states, param)] = std::move(state);
}

void share_adamw_state(RankGroup& group, torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                       int root) {
  if (group.size() == 1 || params.empty()) return;
  torch::NoGradGuard no_grad;
  const auto count = static_cast<int64_t>(params.size());
  // Which parameters have state on the root, and their step counts (-1: none).
  auto steps = torch::full({count}, int64_t{-1}, torch::kInt64);
  for (int64_t i = 0; i < count; ++i) {
    if (const auto* s = adamw_state(optimizer, params[static_cast<size_t>(i)])) steps[i] = s->step();
  }
  group.broadcast(steps, root);
  auto& state = optimizer.state();
  std::vector<torch::Tensor> moments;
  for (int64_t i = 0; i < count; ++i) {
    const auto& param = params[static_cast<size_t>(i)];
    const int64_t step = steps[i].item<int64_t>();
    const auto key = state_key(state, param);
    if (step < 0) {
      state.erase(key);
      continue;
    }
    auto* s = adamw_state(optimizer, param);
    if (s == nullptr) {
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
      fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
      s = fresh.get();
      state[key] = std::move(fresh);
    }
    s->step(step);
    moments.push_back(s->exp_avg());
    moments.push_back(s->exp_avg_sq());
  }
  broadcast_tensors(group, moments, root);
}

}  // namespace sao::algo
