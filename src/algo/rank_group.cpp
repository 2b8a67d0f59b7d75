// Rank groups: the identity and c10d's Gloo process group; see rank_group.hpp.
#include "algo/rank_group.hpp"

#include "base/host_port.hpp"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <map>

namespace sao::algo {

namespace {

class SingleRank final : public RankGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(torch::Tensor& /*tensor*/, ReduceOp /*op*/) override {}
  void broadcast(torch::Tensor& /*tensor*/, int /*root*/) override {}
};

c10d::ReduceOp c10d_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// First line of a c10d/Gloo error (the rest is a C++ backtrace).
std::string first_line(const std::exception& error) {
  std::string what = error.what();
  return what.substr(0, what.find('\n'));
}

class GlooRanks final : public RankGroup {
 public:
  explicit GlooRanks(const RankGroupOptions& options) : options_(options) {
    const std::string where = "learner ranks: rank " + std::to_string(options.rank) + " of " +
                              std::to_string(options.size) + " at " + options.host + ":" + std::to_string(options.port);
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = options.port;
      store_options.isServer = options.rank == 0;
      store_options.numWorkers = static_cast<size_t>(options.size);
      // The group's own rendezvous below waits for every rank; the store
      // need not (so rank 0 can say its port first).
      store_options.waitWorkers = false;
      store_options.timeout = options.timeout;
      auto store = c10::make_intrusive<c10d::TCPStore>(options.host, store_options);
      if (options.rank == 0 && options.on_listening) options.on_listening(store->getPort());
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
      // Each rank's Gloo listens on its own interface: the one that reaches
      // rank 0's address on loopback, the machine's own name otherwise.
      gloo_options->devices.push_back(base::is_loopback_host(options.host)
                                          ? c10d::ProcessGroupGloo::createDeviceForHostname(options.host)
                                          : c10d::ProcessGroupGloo::createDefaultDevice());
      // One Gloo thread: the learner issues one collective at a time.
      gloo_options->threads = 1;
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.size, gloo_options);
    } catch (const std::exception& error) {
      throw RankFailure(where + ": the ranks did not meet within " + std::to_string(options.timeout.count() / 1000) +
                        " s: " + first_line(error));
    }
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    run("all-reduce", tensor, [&](std::vector<at::Tensor>& tensors) {
      c10d::AllreduceOptions reduce;
      reduce.reduceOp = c10d_op(op);
      return group_->allreduce(tensors, reduce);
    });
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    run("broadcast", tensor, [&](std::vector<at::Tensor>& tensors) {
      c10d::BroadcastOptions cast;
      cast.rootRank = root;
      return group_->broadcast(tensors, cast);
    });
  }

 private:
  // Gloo works on host tensors: a device tensor travels through a host copy.
  template <typename Collective>
  void run(const char* what, torch::Tensor& tensor, Collective collective) {
    const auto start = std::chrono::steady_clock::now();
    const bool on_host = tensor.device().is_cpu() && tensor.is_contiguous();
    std::vector<at::Tensor> tensors{on_host ? tensor : tensor.to(torch::kCPU).contiguous()};
    try {
      collective(tensors)->wait();
    } catch (const std::exception& error) {
      throw RankFailure("learner ranks: rank " + std::to_string(options_.rank) + ": " + what + " of " +
                        std::to_string(tensor.numel()) + " values failed (a rank died, left or took longer than " +
                        std::to_string(options_.timeout.count() / 1000) + " s): " + first_line(error));
    }
    if (!on_host) tensor.copy_(tensors.front());
    collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  RankGroupOptions options_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

std::shared_ptr<RankGroup> single_rank() {
  return std::make_shared<SingleRank>();
}

std::vector<double> reduce_numbers(RankGroup& group, std::vector<double> values, ReduceOp op) {
  if (group.size() == 1 || values.empty()) return values;
  auto tensor = torch::tensor(values, torch::kFloat64);
  group.all_reduce(tensor, op);
  const auto* data = tensor.data_ptr<double>();
  return std::vector<double>(data, data + values.size());
}

void reduce_gradients(RankGroup& group, const std::vector<torch::Tensor>& params) {
  if (group.size() == 1 || params.empty()) return;
  torch::NoGradGuard no_grad;
  auto defined = torch::zeros({static_cast<int64_t>(params.size())}, torch::kInt64);
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].grad().defined()) defined[static_cast<int64_t>(i)] = 1;
  }
  group.all_reduce(defined, ReduceOp::kMax);
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (defined[static_cast<int64_t>(i)].item<int64_t>() == 0) continue;
    auto& param = const_cast<torch::Tensor&>(params[i]);
    if (!param.grad().defined()) param.mutable_grad() = torch::zeros_like(param);
    grads.push_back(param.grad());
  }
  // One flat buffer per dtype, summed in that dtype.
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& grad : grads) by_type[grad.scalar_type()].push_back(grad);
  for (auto& [type, same_type] : by_type) {
    std::vector<torch::Tensor> flat;
    for (const auto& grad : same_type) flat.push_back(grad.reshape({-1}));
    auto buffer = torch::cat(flat);
    group.all_reduce(buffer, ReduceOp::kSum);
    int64_t offset = 0;
    for (auto& grad : same_type) {
      const int64_t n = grad.numel();
      grad.copy_(buffer.narrow(0, offset, n).view(grad.sizes()));
      offset += n;
    }
  }
}

void broadcast_tensors(RankGroup& group, const std::vector<torch::Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // One flat buffer per dtype: a model has hundreds of tensors, one collective each would be slow.
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& tensor : tensors) by_type[tensor.scalar_type()].push_back(tensor);
  for (auto& [type, group_tensors] : by_type) {
    std::vector<torch::Tensor> flat;
    for (const auto& tensor : group_tensors) flat.push_back(tensor.detach().reshape({-1}).to(torch::kCPU));
    auto buffer = torch::cat(flat);
    // Gloo in LibTorch 1.13 reduces no bfloat16 (nor int16): its bits travel
    // as bytes (a view, so in place).
    auto wire = type == torch::kBFloat16 ? buffer.view(torch::kUInt8) : buffer;
    group.broadcast(wire, root);
    int64_t offset = 0;
    for (auto& tensor : group_tensors) {
      const int64_t n = tensor.numel();
      const_cast<torch::Tensor&>(tensor).detach().copy_(buffer.narrow(0, offset, n).view(tensor.sizes()));
      offset += n;
    }
  }
}

int64_t bit_fingerprint(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  for (const auto& tensor : tensors) {
    const auto flat = tensor.detach().to(torch::kCPU).contiguous().reshape({-1});
    torch::Tensor bits;
    switch (flat.element_size()) {
      case 1:
        bits = flat.view(torch::kUInt8);
        break;
      case 2:
        bits = flat.view(torch::kInt16);
        break;
      case 4:
        bits = flat.view(torch::kInt32);
        break;
      default:
        bits = flat.view(torch::kInt64);
        break;
    }
    // Unsigned wrap-around: the sum of int64 patterns may overflow.
    total = static_cast<int64_t>(static_cast<uint64_t>(total) +
                                 static_cast<uint64_t>(bits.to(torch::kInt64).sum().item<int64_t>()));
  }
  return total;
}

std::vector<int64_t> gather_numbers(RankGroup& group, int64_t value) {
  auto slots = torch::zeros({group.size()}, torch::kInt64);
  slots[group.rank()] = value;
  group.all_reduce(slots, ReduceOp::kSum);
  const auto* data = slots.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + group.size());
}

std::shared_ptr<RankGroup> join_gloo_group(const RankGroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw Error("learner ranks: rank " + std::to_string(options.rank) + " is not in a group of " +
                std::to_string(options.size));
  }
  if (options.size == 1) return single_rank();
  return std::make_shared<GlooRanks>(options);
}

}  // namespace sao::algo
