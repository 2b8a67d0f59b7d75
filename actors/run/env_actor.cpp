// Env actor behaviour; see env_actor.hpp.
#include "actors/run/env_actor.hpp"

#include "actors/introspection.hpp"
#include "env/environment.hpp"
#include "env/failure_streak.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <utility>

namespace sao::actors {

struct EnvActorState {
  EnvActorConfig config;
  std::map<int64_t, std::unique_ptr<env::Environment>> episodes;
  // Finished environments are reused: an external environment is a process,
  // and starting one per episode would be slow and make restarts meaningless.
  std::vector<std::unique_ptr<env::Environment>> idle;
  int64_t learner_step = -1;
  int64_t errors = 0;
  env::FailureStreak streak{0, ""};
  // Replies held for their simulated latency, by a key the due message carries.
  std::mt19937_64 latency_rng;
  int64_t next_held = 0;
  std::map<int64_t, std::pair<caf::typed_response_promise<msg::EnvReply>, msg::EnvReply>> held;
  ActorCounters counters;
  static inline const char* name = "env";
};

namespace {
msg::EnvReply to_reply(int64_t episode_id, const env::EnvStep& step) {
  return {episode_id, rollout::outcome_of(step.observation, step.reward, step.terminated, step.truncated, step.info)};
}

bool expired(int64_t deadline_unix_ms) {
  return deadline_unix_ms > 0 && unix_time_ms() > deadline_unix_ms;
}

std::unique_ptr<env::Environment> acquire(EnvActorState& state) {
  if (!state.idle.empty()) {
    auto environment = std::move(state.idle.back());
    state.idle.pop_back();
    return environment;
  }
  auto environment = env::make_environment(state.config.environment, state.config.env_config, state.config.name);
  if (state.learner_step >= 0) environment->on_training_step(state.learner_step);
  return environment;
}

void release(EnvActorState& state, int64_t episode_id) {
  auto it = state.episodes.find(episode_id);
  if (it == state.episodes.end()) return;
  state.idle.push_back(std::move(it->second));
  state.episodes.erase(it);
}

using EnvSelf = EnvActor::stateful_pointer<EnvActorState>;

// The reply now, or a promise of it after a drawn latency. Errors are not
// delayed: the simulated latency stands for the work of a healthy call.
caf::result<msg::EnvReply> answer(EnvSelf self, msg::EnvReply reply) {
  auto& state = self->state;
  const double delay_ms = state.config.latency.draw_ms(state.latency_rng);
  if (delay_ms <= 0.0) return reply;
  auto promise = self->make_response_promise<msg::EnvReply>();
  const int64_t key = state.next_held++;
  state.held.emplace(key, std::make_pair(promise, std::move(reply)));
  self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000.0)), atoms::reply_due_atom_v,
                     key);
  return promise;
}

caf::error env_error(EnvActorState& state, msg::Errc code, const std::string& what) {
  ++state.errors;
  state.counters.last_error = what;
  return msg::make_error(code, state.config.name + ": " + what);
}

// An environment call threw: one more failure in a row, which may make the
// environment dead (then the answer says so, with the streak's message).
caf::error env_failed(EnvActorState& state, const std::string& what) {
  if (state.streak.failure(what)) return env_error(state, msg::Errc::kEnvDead, state.streak.describe());
  return env_error(state, msg::Errc::kEnvFailed, what);
}

// The answer to every request once the environment is dead: no more calls.
caf::error env_dead(EnvActorState& state) {
  return env_error(state, msg::Errc::kEnvDead, state.streak.describe());
}
}  // namespace

EnvActor::behavior_type env_actor_behavior(EnvActor::stateful_pointer<EnvActorState> self, EnvActorConfig config) {
  self->state.config = std::move(config);
  self->state.latency_rng.seed(self->state.config.latency_seed);
  self->state.streak = env::FailureStreak(self->state.config.max_failures_in_a_row, self->state.config.environment);
  return counted_behavior<EnvActor::behavior_type>(
      self,
      [self](const msg::EnvReset& request) -> caf::result<msg::EnvReply> {
        auto& state = self->state;
        if (expired(request.deadline_unix_ms))
          return env_error(state, msg::Errc::kRequestExpired, "reset request expired before it was served");
        if (state.streak.dead()) return env_dead(state);
        try {
          auto environment = acquire(state);
          report::WorkTimer timer(state.counters.work[report::kWorkEnv]);
          auto step = environment->reset(request.seed);
          state.episodes[request.episode_id] = std::move(environment);
          state.streak.success();
          return answer(self, to_reply(request.episode_id, step));
        } catch (const std::exception& error) {
          state.episodes.erase(request.episode_id);
          return env_failed(state, std::string("reset failed: ") + error.what());
        }
      },
      [self](const msg::EnvAction& request) -> caf::result<msg::EnvReply> {
        auto& state = self->state;
        auto it = state.episodes.find(request.episode_id);
        if (it == state.episodes.end()) {
          return env_error(state, msg::Errc::kUnknownEpisode,
                           "step for unknown episode " + std::to_string(request.episode_id));
        }
        if (expired(request.deadline_unix_ms)) {
          state.episodes.erase(it);
          return env_error(state, msg::Errc::kRequestExpired, "step request expired before it was served");
        }
        if (state.streak.dead()) {
          state.episodes.erase(it);
          return env_dead(state);
        }
        try {
          report::WorkTimer timer(state.counters.work[report::kWorkEnv]);
          auto step = it->second->step(request.action);
          if (step.terminated || step.truncated) release(state, request.episode_id);
          state.streak.success();
          return answer(self, to_reply(request.episode_id, step));
        } catch (const std::exception& error) {
          state.episodes.erase(request.episode_id);
          return env_failed(state, std::string("step failed: ") + error.what());
        }
      },
      [self](atoms::train_step_atom, int64_t learner_step) {
        auto& state = self->state;
        state.learner_step = learner_step;
        for (auto& environment : state.idle) environment->on_training_step(learner_step);
        for (auto& item : state.episodes) item.second->on_training_step(learner_step);
      },
      [self](atoms::ended_atom, int64_t episode_id, const std::string&) {
        // The rollout cut the episode short: its environment is free again.
        release(self->state, episode_id);
      },
      [self](atoms::reply_due_atom, int64_t key) {
        auto& state = self->state;
        auto it = state.held.find(key);
        if (it == state.held.end()) return;
        it->second.first.deliver(std::move(it->second.second));
        state.held.erase(it);
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        return describe_actor(self, state.config.name, "env", state.episodes.empty() ? "idle" : "serving",
                              state.counters,
                              {{"open_episodes", static_cast<double>(state.episodes.size())},
                               {"idle_environments", static_cast<double>(state.idle.size())},
                               {"replies_held", static_cast<double>(state.held.size())},
                               {"errors", static_cast<double>(state.errors)},
                               {"failures_in_a_row", static_cast<double>(state.streak.length())}});
      });
}

EnvActor spawn_env_actor(caf::actor_system& system, EnvActorConfig config) {
  return system.spawn<caf::detached>(env_actor_behavior, std::move(config));
}

}  // namespace sao::actors
