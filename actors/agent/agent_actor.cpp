// Agent actor behaviour; see agent_actor.hpp.
#include "actors/agent/agent_actor.hpp"

#include "actors/introspection.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace sao::actors {

namespace {
enum class Phase {
  kQueued,  // the first call waits for a rollout slot
  kTurn,    // a call waits for the policy's turn
  kAgent,   // the policy answered; the session waits for its agent's next call or reward
};

struct AgentSession {
  Phase phase = Phase::kQueued;
  int64_t episode_id = -1;
  caf::actor_addr rollout;                       // the rollout playing the episode, once bound
  std::vector<agent::ChatMessage> conversation;  // as the agent sent it, with the replies as the endpoint wrote them
  std::string tools_json;
  int64_t max_tokens = 0;  // of the call waiting for its turn
  int64_t turns = 0;
  // Bumped at every phase change, so a deadline check for an earlier phase is ignored.
  int64_t generation = 0;
  caf::typed_response_promise<msg::AgentTurn> call;  // kQueued, kTurn
  caf::typed_response_promise<msg::EnvReply> step;   // kAgent
};

struct FreeSlot {
  int64_t episode_id = 0;
  caf::actor_addr rollout;  // who asked: a slot of a rollout that stopped is gone
  caf::typed_response_promise<msg::EnvReply> reset;
};
}  // namespace

struct AgentActorState {
  AgentActorConfig config;
  std::map<std::string, AgentSession> sessions;
  std::map<int64_t, std::string> session_of_episode;
  std::deque<FreeSlot> free_slots;     // rollout resets waiting for a session
  std::deque<std::string> queued;      // sessions waiting for a reset (oldest first)
  std::set<caf::actor_addr> rollouts;  // monitored: a rollout that stops takes its slots and episodes with it
  // Introspection numbers.
  int64_t sessions_started = 0;
  int64_t turns_served = 0;
  int64_t episodes_rewarded = 0;
  int64_t heldout_episodes = 0;
  int64_t heldout_successes = 0;
  double heldout_reward_sum = 0.0;
  std::deque<int> heldout_recent;  // the last 100 held-out results (1 success, 0 not): the curve the console shows
  int64_t history_mismatches = 0;
  int64_t abandoned = 0;
  int64_t queue_timeouts = 0;
  int64_t cut_short = 0;
  int64_t lost_with_rollout = 0;
  ActorCounters counters;
  static inline const char* name = "agent";
};

namespace {
using AgentSelf = AgentActor::stateful_pointer<AgentActorState>;

caf::error refusal(AgentActorState& state, msg::Errc code, const std::string& what) {
  state.counters.last_error = what;
  return msg::make_error(code, what);
}

std::vector<tokenizer::ChatTurnMessage> turn_messages(const std::vector<agent::ChatMessage>& messages, size_t from) {
  std::vector<tokenizer::ChatTurnMessage> turn;
  for (size_t i = from; i < messages.size(); ++i) turn.push_back({messages[i].role, messages[i].content});
  return turn;
}

// The first index of an assistant message at or after `from`, or messages.size().
size_t first_assistant(const std::vector<agent::ChatMessage>& messages, size_t from) {
  for (size_t i = from; i < messages.size(); ++i) {
    if (messages[i].role == "assistant") return i;
  }
  return messages.size();
}

void forget(AgentActorState& state, const std::string& session) {
  auto it = state.sessions.find(session);
  if (it == state.sessions.end()) return;
  if (it->second.episode_id >= 0) state.session_of_episode.erase(it->second.episode_id);
  state.sessions.erase(it);
}

void expire_later(AgentSelf self, const std::string& session, int64_t generation, int64_t after_ms) {
  self->delayed_send(self, std::chrono::milliseconds(after_ms), atoms::expire_atom_v, session, generation);
}

// The reset answer that starts `session`'s episode as the rollout's episode `episode_id`.
msg::EnvReply bind_session(AgentActorState& state, const std::string& session, int64_t episode_id,
                           const caf::actor_addr& rollout) {
  auto& entry = state.sessions.at(session);
  entry.episode_id = episode_id;
  entry.rollout = rollout;
  entry.phase = Phase::kTurn;
  ++entry.generation;
  state.session_of_episode[episode_id] = session;
  msg::EnvReply reply;
  reply.episode_id = episode_id;
  reply.outcome.messages = turn_messages(entry.conversation, 0);
  reply.outcome.tools = entry.tools_json;
  reply.outcome.max_new_tokens = entry.max_tokens;
  return reply;
}

caf::result<msg::AgentTurn> start_session(AgentSelf self, msg::AgentCall& call) {
  auto& state = self->state;
  const auto assistant = first_assistant(call.messages, 0);
  if (assistant < call.messages.size()) {
    return refusal(state, msg::Errc::kAgentBadRequest,
                   "messages[" + std::to_string(assistant) +
                       "] is an assistant message sao did not sample; a new session starts with system, user "
                       "and tool messages only (session " +
                       call.session + ")");
  }
  if (static_cast<int64_t>(state.sessions.size()) >= state.config.max_sessions) {
    return refusal(state, msg::Errc::kAgentUnavailable,
                   std::to_string(state.sessions.size()) +
                       " sessions are open or queued (agent.max_sessions); "
                       "end one with its reward first");
  }
  auto& entry = state.sessions[call.session];
  entry.conversation = std::move(call.messages);
  entry.tools_json = std::move(call.tools_json);
  entry.max_tokens = call.max_tokens;
  entry.call = self->make_response_promise<msg::AgentTurn>();
  ++state.sessions_started;
  auto promise = entry.call;
  if (!state.free_slots.empty()) {
    auto slot = std::move(state.free_slots.front());
    state.free_slots.pop_front();
    slot.reset.deliver(bind_session(state, call.session, slot.episode_id, slot.rollout));
  } else {
    state.queued.push_back(call.session);
    expire_later(self, call.session, entry.generation, state.config.queue_timeout_ms);
  }
  return promise;
}

caf::result<msg::AgentTurn> continue_session(AgentSelf self, AgentSession& entry, msg::AgentCall& call) {
  auto& state = self->state;
  const auto& session = call.session;
  if (entry.phase != Phase::kAgent) {
    return refusal(state, msg::Errc::kAgentConflict,
                   "session " + session + " has a call in flight; send the next one after its answer");
  }
  const auto recorded = entry.conversation.size();
  if (call.messages.size() <= recorded) {
    ++state.history_mismatches;
    return refusal(state, msg::Errc::kAgentConflict,
                   "session " + session + ": the call's " + std::to_string(call.messages.size()) +
                       " messages do not extend the session's " + std::to_string(recorded) +
                       " (send the whole conversation, with the assistant's last reply and what follows it)");
  }
  for (size_t i = 0; i < recorded; ++i) {
    const auto difference = agent::message_difference(entry.conversation[i], call.messages[i]);
    if (difference.empty()) continue;
    ++state.history_mismatches;
    return refusal(state, msg::Errc::kAgentConflict,
                   "session " + session + ": messages[" + std::to_string(i) +
                       "] differs from what the session recorded: " + difference +
                       "; sao trains on the ids it sampled and never re-tokenizes an edited history (start a new "
                       "session for another conversation)");
  }
  const auto assistant = first_assistant(call.messages, recorded);
  if (assistant < call.messages.size()) {
    return refusal(state, msg::Errc::kAgentBadRequest,
                   "session " + session + ": messages[" + std::to_string(assistant) +
                       "] is an assistant message sao did not sample (only the replies the endpoint gave may "
                       "appear as assistant messages)");
  }
  if (call.tools_json != entry.tools_json) {
    return refusal(state, msg::Errc::kAgentConflict,
                   "session " + session +
                       ": tools differ from the session's first call (the prompt that lists "
                       "them is already part of the episode)");
  }
  msg::EnvReply reply;
  reply.episode_id = entry.episode_id;
  reply.outcome.messages = turn_messages(call.messages, recorded);
  reply.outcome.max_new_tokens = call.max_tokens;
  entry.conversation = std::move(call.messages);
  entry.phase = Phase::kTurn;
  ++entry.generation;
  entry.call = self->make_response_promise<msg::AgentTurn>();
  auto promise = entry.call;
  entry.step.deliver(std::move(reply));
  return promise;
}

caf::result<msg::EnvReply> take_turn(AgentSelf self, const msg::EnvAction& action) {
  auto& state = self->state;
  auto found = state.session_of_episode.find(action.episode_id);
  if (found == state.session_of_episode.end()) {
    return refusal(state, msg::Errc::kUnknownEpisode,
                   "step for episode " + std::to_string(action.episode_id) + ", which no agent session holds");
  }
  const auto session = found->second;
  auto& entry = state.sessions.at(session);
  if (entry.phase != Phase::kTurn) {
    return refusal(state, msg::Errc::kUnknownEpisode, "step for session " + session + ", which awaits no turn");
  }
  msg::AgentTurn turn;
  auto& result = turn.result;
  result.id = "chatcmpl-" + session + "-" + std::to_string(entry.turns);
  result.model = state.config.model_name;
  result.created_unix_s = unix_time_ms() / 1000;
  result.message = agent::assistant_reply(action.action, "call_" + session + "_" + std::to_string(entry.turns));
  result.closed = action.closed;
  result.token_ids = action.action_ids;
  result.logprobs = action.logprobs;
  result.versions = action.versions;
  result.prompt_tokens = action.context_tokens;
  result.session = session;
  result.turn = entry.turns;
  entry.conversation.push_back(result.message);
  ++entry.turns;
  ++state.turns_served;
  entry.call.deliver(std::move(turn));
  entry.phase = Phase::kAgent;
  ++entry.generation;
  entry.step = self->make_response_promise<msg::EnvReply>();
  expire_later(self, session, entry.generation, state.config.session_timeout_ms);
  return entry.step;
}

caf::result<msg::AgentRewardAck> end_session(AgentSelf self, const msg::AgentReward& request) {
  auto& state = self->state;
  auto it = state.sessions.find(request.session);
  if (it == state.sessions.end()) {
    return refusal(state, msg::Errc::kAgentNotFound,
                   "no session " + request.session + " (never started, already rewarded, abandoned or cut short)");
  }
  auto& entry = it->second;
  if (entry.phase != Phase::kAgent) {
    return refusal(state, msg::Errc::kAgentConflict,
                   "session " + request.session + " has a call in flight; reward it after the answer");
  }
  const auto& rewards = request.reward.turn_rewards;
  if (rewards.size() != 1 && static_cast<int64_t>(rewards.size()) != entry.turns) {
    return refusal(state, msg::Errc::kAgentBadRequest,
                   "rewards has " + std::to_string(rewards.size()) + " values for session " + request.session + "'s " +
                       std::to_string(entry.turns) + " turns (give one reward, or one per turn)");
  }
  msg::EnvReply reply;
  reply.episode_id = entry.episode_id;
  auto& outcome = reply.outcome;
  outcome.terminated = true;
  outcome.reward = rewards.back();
  if (rewards.size() > 1) outcome.turn_rewards = rewards;
  outcome.held_out = request.reward.held_out;
  outcome.success = request.reward.success;
  double total = 0.0;
  for (const auto reward : rewards) total += reward;
  const bool success = request.reward.success >= 0 ? request.reward.success == 1 : total > 0.0;
  if (outcome.success < 0) outcome.success = success ? 1 : 0;
  if (outcome.held_out) {
    ++state.heldout_episodes;
    state.heldout_successes += success ? 1 : 0;
    state.heldout_reward_sum += total;
    state.heldout_recent.push_back(success ? 1 : 0);
    if (state.heldout_recent.size() > 100) state.heldout_recent.pop_front();
  } else {
    ++state.episodes_rewarded;
  }
  msg::AgentRewardAck ack{request.session, entry.turns, outcome.held_out};
  entry.step.deliver(std::move(reply));
  forget(state, request.session);
  return ack;
}

void expire(AgentSelf self, const std::string& session, int64_t generation) {
  auto& state = self->state;
  auto it = state.sessions.find(session);
  if (it == state.sessions.end() || it->second.generation != generation) return;
  auto& entry = it->second;
  const auto seconds = [](int64_t ms) { return std::to_string(ms / 1000) + " s"; };
  if (entry.phase == Phase::kQueued) {
    ++state.queue_timeouts;
    entry.call.deliver(
        refusal(state, msg::Errc::kAgentUnavailable,
                "no rollout slot took session " + session + " within " + seconds(state.config.queue_timeout_ms) +
                    " (agent.queue_timeout_s; rollout.slots x rollout.num_actors sessions run at once)"));
  } else if (entry.phase == Phase::kAgent) {
    ++state.abandoned;
    entry.step.deliver(msg::make_error(msg::Errc::kEnvFailed,
                                       "agent session " + session + " abandoned: no call or reward within " +
                                           seconds(state.config.session_timeout_ms) + " (agent.session_timeout_s)"));
  } else {
    return;  // a turn is being sampled: the policy's pace, not the agent's
  }
  forget(state, session);
}

// A rollout stopped (it is restarted by the coordinator, with new episode
// ids): its free slots are gone, and its sessions' episodes with it.
void rollout_down(AgentSelf self, const caf::actor_addr& rollout) {
  auto& state = self->state;
  state.rollouts.erase(rollout);
  state.free_slots.erase(std::remove_if(state.free_slots.begin(), state.free_slots.end(),
                                        [&](const FreeSlot& slot) { return slot.rollout == rollout; }),
                         state.free_slots.end());
  std::vector<std::string> gone;
  for (auto& [session, entry] : state.sessions) {
    if (entry.phase == Phase::kQueued || entry.rollout != rollout) continue;
    if (entry.phase == Phase::kTurn) {
      entry.call.deliver(
          refusal(state, msg::Errc::kAgentUnavailable,
                  "the rollout playing session " + session + " stopped; its episode is lost (start a new session)"));
    }
    gone.push_back(session);
  }
  state.lost_with_rollout += static_cast<int64_t>(gone.size());
  for (const auto& session : gone) forget(state, session);
}

// The rollout closed an episode without the agent ending it.
void cut(AgentSelf self, int64_t episode_id, const std::string& reason) {
  auto& state = self->state;
  auto found = state.session_of_episode.find(episode_id);
  if (found == state.session_of_episode.end()) return;
  const auto session = found->second;
  auto& entry = state.sessions.at(session);
  ++state.cut_short;
  if (entry.phase == Phase::kTurn) {
    entry.call.deliver(refusal(state, msg::Errc::kAgentBadRequest,
                               "session " + session + " ended before this turn: " + reason +
                                   "; what was sampled so far was trained on as a truncated episode"));
  }
  forget(state, session);
}

msg::ActorStatus status_of(AgentSelf self) {
  const auto& state = self->state;
  int64_t waiting_turn = 0;
  int64_t waiting_agent = 0;
  for (const auto& item : state.sessions) {
    if (item.second.phase == Phase::kTurn) ++waiting_turn;
    if (item.second.phase == Phase::kAgent) ++waiting_agent;
  }
  const auto heldout = static_cast<double>(state.heldout_episodes);
  double recent_successes = 0.0;
  for (const auto result : state.heldout_recent) recent_successes += result;
  const auto recent = static_cast<double>(state.heldout_recent.size());
  return describe_actor(
      self, state.config.name, "agent", state.sessions.empty() ? "idle" : "serving", state.counters,
      {{"sessions_open", static_cast<double>(state.sessions.size())},
       {"sessions_queued", static_cast<double>(state.queued.size())},
       {"sessions_in_turn", static_cast<double>(waiting_turn)},
       {"sessions_with_agent", static_cast<double>(waiting_agent)},
       {"free_slots", static_cast<double>(state.free_slots.size())},
       {"sessions_started", static_cast<double>(state.sessions_started)},
       {"turns_served", static_cast<double>(state.turns_served)},
       {"episodes_rewarded", static_cast<double>(state.episodes_rewarded)},
       {"heldout_episodes", heldout},
       {"heldout_success_rate", heldout > 0 ? static_cast<double>(state.heldout_successes) / heldout : 0.0},
       {"heldout_mean_reward", heldout > 0 ? state.heldout_reward_sum / heldout : 0.0},
       {"heldout_success_last100", recent > 0 ? recent_successes / recent : 0.0},
       {"history_mismatches", static_cast<double>(state.history_mismatches)},
       {"sessions_abandoned", static_cast<double>(state.abandoned)},
       {"queue_timeouts", static_cast<double>(state.queue_timeouts)},
       {"sessions_cut_short", static_cast<double>(state.cut_short)},
       {"sessions_lost_with_rollout", static_cast<double>(state.lost_with_rollout)}});
}
}  // namespace

AgentActor::behavior_type agent_actor_behavior(AgentSelf self, AgentActorConfig config) {
  self->state.config = std::move(config);
  self->set_down_handler([self](caf::down_msg& down) { rollout_down(self, down.source); });
  // The run is ending: every call still waiting hears so now, instead of at
  // its HTTP worker's timeout (a promise dropped with the actor answers nobody).
  self->set_exit_handler([self](caf::exit_msg& exit) {
    for (auto& [session, entry] : self->state.sessions) {
      if (entry.phase == Phase::kAgent) continue;  // no call waiting
      entry.call.deliver(msg::make_error(msg::Errc::kAgentUnavailable,
                                         "the run is ending: session " + session + " gets no more turns"));
    }
    self->state.sessions.clear();
    self->quit(exit.reason);
  });
  return counted_behavior<AgentActor::behavior_type>(
      self,
      [self](const msg::EnvReset& reset) -> caf::result<msg::EnvReply> {
        auto& state = self->state;
        const auto rollout = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (rollout && state.rollouts.insert(rollout).second) self->monitor(rollout);
        while (!state.queued.empty()) {
          const auto session = std::move(state.queued.front());
          state.queued.pop_front();
          auto it = state.sessions.find(session);
          if (it == state.sessions.end() || it->second.phase != Phase::kQueued) continue;  // expired meanwhile
          return bind_session(state, session, reset.episode_id, rollout);
        }
        auto promise = self->make_response_promise<msg::EnvReply>();
        state.free_slots.push_back({reset.episode_id, rollout, promise});
        return promise;
      },
      [self](const msg::EnvAction& action) { return take_turn(self, action); },
      [self](atoms::train_step_atom, int64_t) {}, [self](atoms::reply_due_atom, int64_t) {},
      [self](atoms::ended_atom, int64_t episode_id, const std::string& reason) { cut(self, episode_id, reason); },
      [self](msg::AgentCall& call) -> caf::result<msg::AgentTurn> {
        auto it = self->state.sessions.find(call.session);
        if (it == self->state.sessions.end()) return start_session(self, call);
        return continue_session(self, it->second, call);
      },
      [self](const msg::AgentReward& reward) { return end_session(self, reward); },
      [self](atoms::expire_atom, const std::string& session, int64_t generation) { expire(self, session, generation); },
      [self](atoms::status_atom) { return status_of(self); });
}

AgentActor spawn_agent_actor(caf::actor_system& system, AgentActorConfig config) {
  return system.spawn(agent_actor_behavior, std::move(config));
}

}  // namespace sao::actors
