// The step protocol between learner ranks; see learner_ranks.hpp.
#include "algo/learner_ranks.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "model/device.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"

#include <torch/torch.h>

#include <cstring>
#include <limits>
#include <string>

namespace sao::algo {

namespace {

enum Command : int64_t { kStep = 1, kActorLr = 2, kCriticLr = 3, kShareState = 4, kStop = 5, kSave = 6 };

// Header: [command, payload bytes, value's bits].
constexpr int64_t kHeaderSize = 3;
// A step's trajectories are a few megabytes; a setup, kilobytes.
constexpr int64_t kMaxPayloadBytes = int64_t{1} << 34;

void broadcast_bytes(RankGroup& group, std::vector<uint8_t>& bytes, int64_t size) {
  if (size == 0) return;
  auto tensor = torch::empty({size}, torch::kUInt8);
  if (group.rank() == 0) std::memcpy(tensor.data_ptr<uint8_t>(), bytes.data(), static_cast<size_t>(size));
  group.broadcast(tensor, 0);
  if (group.rank() != 0) bytes.assign(tensor.data_ptr<uint8_t>(), tensor.data_ptr<uint8_t>() + size);
}

struct Header {
  int64_t kind = 0;
  int64_t bytes = 0;
  double value = 0.0;
};

Header broadcast_header(RankGroup& group, Header header) {
  int64_t bits = 0;
  std::memcpy(&bits, &header.value, sizeof bits);
  auto tensor = torch::tensor({header.kind, header.bytes, bits}, torch::kInt64);
  group.broadcast(tensor, 0);
  header.kind = tensor[0].item<int64_t>();
  header.bytes = tensor[1].item<int64_t>();
  bits = tensor[2].item<int64_t>();
  std::memcpy(&header.value, &bits, sizeof bits);
  if (header.bytes < 0 || header.bytes > kMaxPayloadBytes) {
    throw RankFailure("learner ranks: rank 0 announced a payload of " + std::to_string(header.bytes) + " bytes");
  }
  return header;
}

void check_after_step(Learner& learner) {
  const int64_t every = learner.config().rank_check_every;
  if (every > 0 && learner.steps() % every == 0) learner.check_ranks_agree();
}

// Little-endian-agnostic writer/reader: both ends are builds of sao on
// machines of one kind (the ranks of one run).
class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    bytes.insert(bytes.end(), p, p + values.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get(const char* what) {
    T value;
    take(&value, sizeof(T), what);
    return value;
  }
  template <typename T>
  std::vector<T> get_vector(uint64_t count, const char* what) {
    if (count > (bytes_.size() - offset_) / sizeof(T)) fail(what);
    std::vector<T> values(static_cast<size_t>(count));
    take(values.data(), values.size() * sizeof(T), what);
    return values;
  }
  bool done() const { return offset_ == bytes_.size(); }

 private:
  void take(void* out, size_t n, const char* what) {
    if (n > bytes_.size() - offset_) fail(what);
    std::memcpy(out, bytes_.data() + offset_, n);
    offset_ += n;
  }
  [[noreturn]] void fail(const char* what) const {
    throw Error(std::string("learner ranks: step message truncated at byte ") + std::to_string(offset_) + " (" + what +
                ")");
  }
  const std::vector<uint8_t>& bytes_;
  size_t offset_ = 0;
};

constexpr uint32_t kTrajectoryMagic = 0x54414f53;  // "SOAT"

}  // namespace

std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& trajectories) {
  Writer out;
  out.put(kTrajectoryMagic);
  out.put(static_cast<uint64_t>(trajectories.size()));
  for (const auto& tr : trajectories) {
    out.put(static_cast<uint64_t>(tr.tokens.size()));
    out.put(static_cast<uint64_t>(tr.action_mask.size()));
    out.put(static_cast<uint64_t>(tr.behaviour_logprobs.size()));
    out.put(static_cast<uint64_t>(tr.policy_versions.size()));
    out.put(static_cast<uint64_t>(tr.rewards.size()));
    out.put_vector(tr.tokens);
    out.put_vector(tr.action_mask);
    out.put_vector(tr.behaviour_logprobs);
    out.put_vector(tr.policy_versions);
    out.put_vector(tr.rewards);
    out.put(static_cast<uint8_t>(tr.terminated));
    out.put(static_cast<uint8_t>(tr.truncated));
    out.put(tr.group_id);
    out.put(tr.accuracy);
    out.put(tr.origin.turns);
  }
  return std::move(out.bytes);
}

std::vector<Trajectory> decode_trajectories(const std::vector<uint8_t>& bytes) {
  Reader in(bytes);
  if (in.get<uint32_t>("magic") != kTrajectoryMagic) throw Error("learner ranks: step message: not trajectories");
  const auto count = in.get<uint64_t>("trajectory count");
  // Each trajectory takes at least its five counts.
  if (count > bytes.size() / (5 * sizeof(uint64_t))) {
    throw Error("learner ranks: step message claims " + std::to_string(count) + " trajectories in " +
                std::to_string(bytes.size()) + " bytes");
  }
  std::vector<Trajectory> out(static_cast<size_t>(count));
  for (auto& tr : out) {
    uint64_t sizes[5];
    for (auto& size : sizes) size = in.get<uint64_t>("field length");
    tr.tokens = in.get_vector<int64_t>(sizes[0], "tokens");
    tr.action_mask = in.get_vector<uint8_t>(sizes[1], "action mask");
    tr.behaviour_logprobs = in.get_vector<float>(sizes[2], "log-probs");
    tr.policy_versions = in.get_vector<int64_t>(sizes[3], "versions");
    tr.rewards = in.get_vector<float>(sizes[4], "rewards");
    tr.terminated = in.get<uint8_t>("terminated") != 0;
    tr.truncated = in.get<uint8_t>("truncated") != 0;
    tr.group_id = in.get<int64_t>("group id");
    tr.accuracy = in.get<double>("accuracy");
    tr.origin.turns = in.get<int64_t>("turns");
  }
  if (!in.done()) throw Error("learner ranks: step message has bytes after its last trajectory");
  return out;
}

void send_rank_setup(RankGroup& group, const nlohmann::json& setup) {
  const std::string text = setup.dump();
  std::vector<uint8_t> bytes(text.begin(), text.end());
  const auto header = broadcast_header(group, {0, static_cast<int64_t>(bytes.size()), 0.0});
  broadcast_bytes(group, bytes, header.bytes);
}

nlohmann::json receive_rank_setup(RankGroup& group) {
  const auto header = broadcast_header(group, {});
  std::vector<uint8_t> bytes;
  broadcast_bytes(group, bytes, header.bytes);
  return base::parse_json_limited(std::string(bytes.begin(), bytes.end()), "learner ranks: rank 0's setup");
}

RankLeader::RankLeader(Learner& learner) : learner_(learner) {
  if (learner.ranks().rank() != 0) throw Error("learner ranks: only rank 0 leads");
}

void RankLeader::command(int64_t kind, const std::vector<uint8_t>& payload, double value) {
  if (learner_.ranks().size() == 1) return;
  if (stopped_) throw RankFailure("learner ranks: the followers were stopped");
  auto bytes = payload;
  const auto header = broadcast_header(learner_.ranks(), {kind, static_cast<int64_t>(bytes.size()), value});
  broadcast_bytes(learner_.ranks(), bytes, header.bytes);
}

StepResult RankLeader::step(const std::vector<Trajectory>& trajectories) {
  command(kStep, learner_.ranks().size() == 1 ? std::vector<uint8_t>() : encode_trajectories(trajectories));
  auto result = learner_.step(trajectories);
  if (!trajectories.empty()) check_after_step(learner_);
  return result;
}

void RankLeader::set_actor_lr(double lr) {
  learner_.set_actor_lr(lr);  // checked here first: a refused rate is sent to nobody
  command(kActorLr, {}, lr);
}

void RankLeader::set_critic_lr(double lr) {
  learner_.set_critic_lr(lr);
  command(kCriticLr, {}, lr);
}

void RankLeader::share_state() {
  command(kShareState);
  learner_.share_state(0);
}

void RankLeader::save(const std::string& dir) {
  command(kSave);
  learner_.save(dir);
}

void RankLeader::stop() {
  if (stopped_ || learner_.ranks().size() == 1) return;
  command(kStop);
  stopped_ = true;
}

int64_t follow_leader(Learner& learner) {
  auto& group = learner.ranks();
  if (group.rank() == 0) throw Error("learner ranks: rank 0 leads, it does not follow");
  int64_t steps = 0;
  for (;;) {
    const auto header = broadcast_header(group, {});
    std::vector<uint8_t> bytes;
    broadcast_bytes(group, bytes, header.bytes);
    switch (header.kind) {
      case kStep: {
        const auto trajectories = decode_trajectories(bytes);
        try {
          learner.step(trajectories);
        } catch (const RankFailure&) {
          throw;
        } catch (const Error&) {
          // A malformed batch fails the same way on rank 0, before any
          // collective: it is rank 0's to report; the ranks go on together.
          continue;
        }
        ++steps;
        if (!trajectories.empty()) check_after_step(learner);
        break;
      }
      case kActorLr:
        learner.set_actor_lr(header.value);
        break;
      case kCriticLr:
        learner.set_critic_lr(header.value);
        break;
      case kShareState:
        learner.share_state(0);
        break;
      case kSave:
        learner.save("");
        break;
      case kStop:
        return steps;
      default:
        throw RankFailure("learner ranks: unknown command " + std::to_string(header.kind) + " from rank 0");
    }
  }
}

RankSetup read_rank_setup(const nlohmann::json& setup) {
  const std::string where = "learner ranks: rank 0's setup";
  if (!setup.is_object() || !setup.contains("model") || !setup.contains("learner") || setup.size() != 2) {
    throw Error(where + ": expected an object with 'model' and 'learner' only");
  }
  RankSetup out;
  out.model = model::model_config_from_json(setup.at("model"), where + ".model", model::ConfigKind::kRunConfig);
  base::JsonReader reader(setup.at("learner"), where + ".learner");
  out.learner = LearnerConfig::from_json(reader);
  return out;
}

int64_t serve_learner_rank(const RankGroupOptions& options, const std::string& device) {
  if (options.rank == 0)
    throw Error("learner ranks: rank 0 is the run's learner (sao train / sao node --role learner)");
  auto group = join_gloo_group(options);
  auto setup = read_rank_setup(receive_rank_setup(*group));
  const auto& model_config = setup.model;
  auto& config = setup.learner;
  if (!device.empty()) config.device = device;
  const auto placement = model::parse_device(config.device, "learner-rank --device");
  model::CausalLM policy(model_config);
  policy->to(placement);
  model::ValueModel critic{nullptr};
  if (config.uses_critic()) {
    critic = model::ValueModel(model_config);
    critic->to(placement);
  }
  // Random weights until rank 0's first command shares its own.
  Learner learner(config, policy, critic, group);
  return follow_leader(learner);
}

}  // namespace sao::algo
