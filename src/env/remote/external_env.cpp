// External environments over line-oriented JSON; see external_env.hpp and
// docs/environments.md for the protocol.
#include "env/remote/external_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "base/utf8.hpp"

namespace sao::env {

namespace {
std::string label_of(const ExternalConfig& config) {
  return config.label.empty() ? default_channel_label(config.channel) : config.label;
}
}  // namespace

ExternalEnvironment::ExternalEnvironment(ExternalConfig config)
    : config_(std::move(config)),
      label_(label_of(config_)),
      channel_(config_.channel, "external env '" + label_ + "'", "environment") {}

nlohmann::json ExternalEnvironment::call(nlohmann::json request) {
  nlohmann::json reply;
  try {
    reply = channel_.call(std::move(request));
  } catch (...) {
    episode_open_ = false;  // after any error the episode is over
    throw;
  }
  const std::string what = channel_.last_call();
  const std::string line = base::dump_json(reply);
  auto fail = [&](const std::string& problem) {
    episode_open_ = false;
    channel_.fail(what, problem, true);
  };
  auto require = [&](const char* key, bool ok, const char* type) {
    if (!reply.contains(key)) fail(std::string("reply has no \"") + key + "\": " + base::quoted_excerpt(line));
    if (!ok) {
      fail(std::string("\"") + key + "\" must be " + type + ", got " + reply[key].type_name() + " " +
           base::quoted_excerpt(base::dump_json(reply[key])));
    }
  };
  require("observation", reply.contains("observation") && reply["observation"].is_string(), "a string");
  require("reward", reply.contains("reward") && reply["reward"].is_number(), "a number");
  require("terminated", reply.contains("terminated") && reply["terminated"].is_boolean(), "a boolean");
  require("truncated", reply.contains("truncated") && reply["truncated"].is_boolean(), "a boolean");
  if (reply.contains("info") && !reply["info"].is_object()) {
    fail(std::string("\"info\" must be an object, got ") + reply["info"].type_name());
  }
  return reply;
}

// `reply` has passed the field checks of call().
EnvStep ExternalEnvironment::open_or_close_episode(const nlohmann::json& reply) {
  EnvStep result;
  result.observation = reply["observation"].get<std::string>();
  result.reward = reply["reward"].get<double>();
  result.terminated = reply["terminated"].get<bool>();
  result.truncated = reply["truncated"].get<bool>();
  if (reply.contains("info")) result.info = reply["info"];
  episode_open_ = !result.done();
  return result;
}

EnvStep ExternalEnvironment::begin_episode(nlohmann::json request) {
  episode_open_ = false;
  if (config_.process_per_episode) channel_.close();  // a fresh process for every episode
  channel_.ensure_connected();
  return open_or_close_episode(call(std::move(request)));
}

EnvStep ExternalEnvironment::reset(uint64_t seed) {
  return begin_episode({{"method", "reset"}, {"seed", seed}, {"learner_step", learner_step_}});
}

EnvStep ExternalEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= config_.heldout_size) {
    throw Error("external env '" + label_ + "': held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(config_.heldout_size) + ") (config heldout_size)");
  }
  return begin_episode({{"method", "reset"}, {"heldout", index}, {"learner_step", learner_step_}});
}

EnvStep ExternalEnvironment::step(const std::string& action) {
  if (!episode_open_) {
    throw Error("external env '" + label_ + "': step() called before reset() or after the episode ended");
  }
  return open_or_close_episode(call({{"method", "step"}, {"action", action}}));
}

EnvLimits ExternalEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.max_turns;
  return limits;
}

nlohmann::json ExternalEnvironment::stats() const {
  return {{"restarts", channel_.restarts()},
          {"timeouts", channel_.timeouts()},
          {"calls", channel_.calls()},
          {"errors", channel_.errors()}};
}

ExternalConfig external_config_from_json(const nlohmann::json& config, const std::string& where) {
  ExternalConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, ExternalEnvironment::kName, where);
  read_channel_config(reader, result.channel);
  reader.read("label", result.label);
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 1000000});
  reader.read("max_turns", result.max_turns, base::IntRange{0, 100000});
  reader.read("process_per_episode", result.process_per_episode);
  reader.reject_unknown_keys();
  validate_channel_config(result.channel, where);
  return result;
}

std::unique_ptr<Environment> make_external_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<ExternalEnvironment>(external_config_from_json(config, where));
}

}  // namespace sao::env
