// Every message type survives CAF's binary serializer, both as a value and
// inside a caf::message (which also proves the type-ID block is registered):
// the wire format used between processes.
#include "actors/protocol.hpp"
#include "weights/checksum.hpp"

#include <doctest/doctest.h>

#include <cmath>

namespace {

struct System {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  System() {
    sao::actors::register_protocol(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

template <class T>
std::vector<char> serialize(caf::actor_system& system, T& value) {
  std::vector<char> buffer;
  caf::binary_serializer sink{system, buffer};
  auto error = sink(value);
  REQUIRE_MESSAGE(!error, system.render(error));
  return buffer;
}

// Round trip: bytes -> value -> bytes must reproduce the bytes, and the
// same value must also round-trip as the payload of a caf::message.
template <class T>
T round_trip(caf::actor_system& system, T value) {
  auto bytes = serialize(system, value);
  T restored;
  caf::binary_deserializer source{system, bytes};
  auto error = source(restored);
  REQUIRE_MESSAGE(!error, system.render(error));
  CHECK(serialize(system, restored) == bytes);
  auto message = caf::make_message(value);
  auto message_bytes = serialize(system, message);
  caf::message restored_message;
  caf::binary_deserializer message_source{system, message_bytes};
  error = message_source(restored_message);
  REQUIRE_MESSAGE(!error, system.render(error));
  REQUIRE(restored_message.match_element<T>(0));
  CHECK(serialize(system, restored_message) == message_bytes);
  return restored;
}

// Two tensors: 12 bytes of F32 at offset 0, 16 bytes of I64 at offset 64.
sao::weights::Packet sample_weights(int64_t version) {
  return sao::weights::host_packet(version,
                                   sao::model::pack_tensors({{"model.norm.weight", torch::tensor({1.5f, -2.0f, 3.25f})},
                                                             {"ids", torch::tensor({1, 2}, torch::kInt64)}}));
}

sao::algo::Trajectory sample_trajectory() {
  sao::algo::Trajectory t;
  t.tokens = {257, 49, 43, 50, 61, 51, 258};
  t.action_mask = {0, 0, 0, 0, 0, 1, 1};
  t.behaviour_logprobs = {0, 0, 0, 0, 0, -0.25f, -1.5f};
  t.policy_versions = {-1, -1, -1, -1, -1, 7, 8};
  t.rewards = {0, 0, 0, 0, 0, 0, 1};
  t.terminated = false;
  t.truncated = true;
  t.group_id = (int64_t{3} << 40) + 9;
  t.accuracy = 1.0;
  return t;
}

}  // namespace

TEST_CASE("a weight message that promises more bytes than it holds is refused before allocating") {
  System s;
  auto& system = *s.system;
  auto weights = sample_weights(3);
  REQUIRE(weights.tensors.bytes.size() == 80);
  auto bytes = serialize(system, weights);
  // Cut 61 bytes off the end: the last 52 are the (empty) CUDA IPC handle's
  // length byte, the bulk port (2), the bulk byte count (8) and the empty
  // bf16 delta (four 8-byte numbers, the payload's length byte, its 8-byte
  // checksum), so the raw block loses 9 of its 80 bytes; the count still
  // says 80.
  bytes.resize(bytes.size() - 61);
  sao::weights::Packet restored;
  caf::binary_deserializer source{system, bytes};
  const auto error = source(restored);
  REQUIRE(error);
  const auto text = system.render(error);
  CHECK_MESSAGE(text.find("PackedTensors: the message says 80 bytes but holds 71") != std::string::npos, text);
  CHECK(restored.tensors.bytes.empty());
}

TEST_CASE("every message type round-trips through the binary serializer") {
  System s;
  auto& system = *s.system;

  const auto weights = sample_weights(12);
  auto weights_back = round_trip(system, weights);
  CHECK(weights_back.version == 12);
  CHECK(weights_back.route == sao::weights::Route::kCafBytes);
  CHECK(weights_back.checksum == weights.checksum);
  CHECK(weights_back.checksum == sao::weights::checksum_of(weights_back.tensors));
  REQUIRE(weights_back.tensors.index.size() == 2);
  CHECK(weights_back.tensors.bytes == weights.tensors.bytes);
  CHECK(torch::equal(sao::model::unpack_tensor(weights_back.tensors, 0), torch::tensor({1.5f, -2.0f, 3.25f})));
  CHECK(weights_back.tensors.index[1].name == "ids");
  CHECK(weights_back.tensors.index[1].dtype == "I64");
  CHECK(weights_back.tensors.index[1].offset == 64);
  CHECK(weights_back.tensors.index[1].size == 16);
  CHECK(weights_back.locator.empty());
  CHECK(weights_back.on_device == nullptr);
  CHECK(weights_back.bulk_port == 0);
  // The bulk-channel notice: the index, no bytes, the port and the size.
  sao::weights::Packet notice;
  notice.version = 13;
  notice.route = sao::weights::Route::kBulkChannel;
  notice.tensors.index = weights.tensors.index;
  notice.bulk_port = 40123;
  notice.bulk_bytes = 80;
  const auto notice_back = round_trip(system, notice);
  CHECK(notice_back.route == sao::weights::Route::kBulkChannel);
  CHECK(notice_back.bulk_port == 40123);
  CHECK(notice_back.bulk_bytes == 80);
  CHECK(notice_back.tensors.bytes.empty());
  CHECK(notice_back.tensors.index.size() == 2);
  // The CUDA IPC form: the index, no bytes, the handle's text. A device
  // buffer never travels: inspect() does not write `on_device`.
  auto ipc = sample_weights(13);
  ipc.tensors.bytes.clear();
  ipc.route = sao::weights::Route::kCudaIpc;
  ipc.locator = std::string(128, 'a') + ":80:GPU-0000";
  ipc.on_device = std::make_shared<const sao::model::DevicePackedTensors>();
  const auto ipc_back = round_trip(system, ipc);
  CHECK(ipc_back.route == sao::weights::Route::kCudaIpc);
  CHECK(ipc_back.checksum == ipc.checksum);
  CHECK(ipc_back.locator == ipc.locator);
  CHECK(ipc_back.tensors.index.size() == 2);
  CHECK(ipc_back.tensors.bytes.empty());
  CHECK(ipc_back.on_device == nullptr);
  // The bf16 delta: the index, the change from the base version, no bytes.
  sao::weights::Packet delta;
  delta.version = 14;
  delta.route = sao::weights::Route::kBf16Delta;
  delta.checksum = 0x0123456789abcdefULL;
  delta.tensors.index = weights.tensors.index;
  delta.delta.base_version = 13;
  delta.delta.version = 14;
  delta.delta.elements = 5;
  delta.delta.changed = 2;
  delta.delta.payload = {0x00, 0x41};
  delta.delta.checksum = 0x0123456789abcdefULL;
  const auto delta_back = round_trip(system, delta);
  CHECK(delta_back.route == sao::weights::Route::kBf16Delta);
  CHECK(delta_back.delta.base_version == 13);
  CHECK(delta_back.delta.version == 14);
  CHECK(delta_back.delta.elements == 5);
  CHECK(delta_back.delta.changed == 2);
  CHECK(delta_back.delta.payload == std::vector<uint8_t>{0x00, 0x41});
  CHECK(delta_back.delta.checksum == 0x0123456789abcdefULL);
  CHECK(delta_back.tensors.bytes.empty());
  const auto placement = round_trip(system, sao::msg::RolloutPlacement{"cuda:1", "GPU-1234", true});
  CHECK(placement.device == "cuda:1");
  CHECK(placement.gpu_uuid == "GPU-1234");
  CHECK(placement.bf16_replica);

  auto reset = round_trip(system, sao::msg::EnvReset{5, 0xdeadbeefcafeULL, 1700000000123});
  CHECK(reset.seed == 0xdeadbeefcafeULL);
  CHECK(reset.deadline_unix_ms == 1700000000123);
  sao::msg::EnvAction sent_action;
  sent_action.episode_id = 5;
  sent_action.action = "46\n";
  sent_action.deadline_unix_ms = 1700000000456;
  sent_action.action_ids = {52, 54, 10, 300};
  sent_action.logprobs = {-0.25F, -1.5F, -0.125F, -3.0F};
  sent_action.versions = {7, 7, 8, 8};
  sent_action.closed = true;
  sent_action.context_tokens = 19;
  auto action = round_trip(system, sent_action);
  CHECK(action.action == "46\n");
  CHECK(action.deadline_unix_ms == 1700000000456);
  CHECK(action.action_ids == sent_action.action_ids);
  CHECK(action.logprobs == sent_action.logprobs);
  CHECK(action.versions == sent_action.versions);
  CHECK(action.closed);
  CHECK(action.context_tokens == 19);
  sao::rollout::EnvOutcome outcome;
  outcome.observation = "obs";
  outcome.reward = 0.5;
  outcome.truncated = true;
  outcome.accuracy = 1.0;
  outcome.success = 0;
  outcome.regime_index = 2.0;
  auto reply = round_trip(system, sao::msg::EnvReply{5, outcome});
  CHECK(reply.episode_id == 5);
  CHECK(reply.outcome.observation == "obs");
  CHECK(reply.outcome.truncated);
  CHECK(reply.outcome.reward == 0.5);
  CHECK(reply.outcome.accuracy == 1.0);
  CHECK(reply.outcome.success == 0);
  CHECK(reply.outcome.regime_index == 2.0);
  outcome.messages = {{"tool", "4"}, {"user", "and?"}};
  outcome.max_new_tokens = 12;
  outcome.held_out = true;
  outcome.turn_rewards = {0.25, 1.0};
  auto agent_reply = round_trip(system, sao::msg::EnvReply{6, outcome});
  REQUIRE(agent_reply.outcome.messages.size() == 2);
  CHECK(agent_reply.outcome.messages[1].role == "user");
  CHECK(agent_reply.outcome.messages[1].content == "and?");
  CHECK(agent_reply.outcome.max_new_tokens == 12);
  CHECK(agent_reply.outcome.held_out);
  CHECK(agent_reply.outcome.turn_rewards == std::vector<double>{0.25, 1.0});
  sao::msg::AgentTurn turn;
  turn.result.id = "chatcmpl-s-0";
  turn.result.message = sao::agent::assistant_reply("<tool_call>{\"name\": \"calc\"}</tool_call>", "call_s_0");
  turn.result.token_ids = {1, 2};
  turn.result.logprobs = {-0.5F, -0.75F};
  turn.result.versions = {3, 3};
  auto turn_back = round_trip(system, turn);
  REQUIRE(turn_back.result.message.tool_calls.size() == 1);
  CHECK(turn_back.result.message.tool_calls[0].id == "call_s_0_0");
  CHECK(turn_back.result.logprobs == turn.result.logprobs);

  auto trajectory = sample_trajectory();
  trajectory.origin = {"rollout-3", 2, 123456789, 1.0};
  auto trajectory_back = round_trip(system, trajectory);
  CHECK(trajectory_back.tokens == trajectory.tokens);
  CHECK(trajectory_back.behaviour_logprobs == trajectory.behaviour_logprobs);
  CHECK(trajectory_back.policy_versions == trajectory.policy_versions);
  CHECK(trajectory_back.truncated);
  CHECK(trajectory_back.group_id == trajectory.group_id);
  CHECK(trajectory_back.origin.rollout == "rollout-3");
  CHECK(trajectory_back.origin.turns == 2);
  CHECK(trajectory_back.origin.finished_at_ns == 123456789);
  CHECK(trajectory_back.origin.regime_index == 1.0);

  const auto ack_back = round_trip(system, sao::msg::ReplayAck{true, 17, false, 47, true});
  CHECK(ack_back.queued == 17);
  CHECK(ack_back.room == 47);
  CHECK(ack_back.learner_starved);
  sao::msg::TrainBatch batch{{trajectory, trajectory}, 3, 9};
  auto batch_back = round_trip(system, batch);
  REQUIRE(batch_back.trajectories.size() == 2);
  CHECK(batch_back.trajectories[1].origin.rollout == "rollout-3");
  CHECK(batch_back.dropped_stale == 3);
  auto report =
      round_trip(system, sao::msg::StepReport{4, 3, true, {{"reward_mean", 0.25}, {"policy_loss", -1.0}}, {1.5, 2.5}});
  CHECK(report.policy_updated);
  CHECK(report.metrics.at("reward_mean") == 0.25);
  CHECK(report.rollout_to_learner_ms == std::vector<double>{1.5, 2.5});
  const auto eval = round_trip(
      system, sao::msg::EvalReport{
                  10, 9, 0.375, 400, "test", {{"worked", 120}, {"worked_correct", 99.5}}, 12.5, 7, "env dead"});
  CHECK(eval.accuracy == 0.375);
  CHECK(eval.counts == std::map<std::string, double>{{"worked", 120}, {"worked_correct", 99.5}});
  CHECK(eval.seconds == 12.5);
  CHECK(eval.errors == 7);
  CHECK(eval.env_dead == "env dead");
  const auto ack = round_trip(system, sao::msg::VersionAck{"rollout-1", 44, sao::weights::Route::kBulkChannel,
                                                           "bulk: refused", 0x0123456789abcdefULL, false});
  CHECK(ack.version == 44);
  CHECK(ack.failed_route == sao::weights::Route::kBulkChannel);
  CHECK(ack.error == "bulk: refused");
  CHECK(ack.checksum == 0x0123456789abcdefULL);
  CHECK_FALSE(ack.verified);
  auto lost = round_trip(system, sao::msg::EpisodeLost{"rollout-1", sao::msg::LossCause::kEnvTimeout, "env step"});
  CHECK(lost.cause == sao::msg::LossCause::kEnvTimeout);
  CHECK(lost.detail == "env step");
  CHECK(round_trip(system, sao::msg::ActorRestarted{"env", "env-0"}).name == "env-0");
  sao::msg::ActorStatus sent{"replay",
                             "replay",
                             "busy",
                             {{"queued", 3}},
                             5,
                             1234,
                             "bad batch",
                             "node-a",
                             42,
                             "evaluating, step 12",
                             {10.5, 30.25, 1.5, {{"model", {8.0, 7.5, 100}}}}};
  auto status = round_trip(system, sent);
  CHECK(status.activity == "evaluating, step 12");
  CHECK(status.time.alive_s == 10.5);
  CHECK(status.time.process_cpu_s == 30.25);
  CHECK(status.time.process_cpu_at_start_s == 1.5);
  CHECK(status.time.work.at("model").cpu_s == 7.5);
  CHECK(status.time.work.at("model").calls == 100);
  CHECK(status.numbers.at("queued") == 3);
  CHECK(status.mailbox_depth == 5);
  CHECK(status.messages_handled == 1234);
  CHECK(status.last_error == "bad batch");
  CHECK(status.node == "node-a");
  CHECK(status.actor_id == 42);
  auto event = round_trip(system, sao::msg::ControlEvent{"set", "min_batch", "4", "http 127.0.0.1", 4.0});
  CHECK(event.command == "set");
  CHECK(event.key == "min_batch");
  CHECK(event.value == "4");
  CHECK(event.origin == "http 127.0.0.1");
  CHECK(event.number == 4.0);
  const auto knob = round_trip(system, sao::msg::SetKnob{sao::config::Knob::kCriticLr, 0.25});
  CHECK(knob.knob == sao::config::Knob::kCriticLr);
  CHECK(knob.value == 0.25);
  auto finished = round_trip(system, sao::msg::RunFinished{100, 90, sao::msg::RunEnd::kLearnerFailed, "oom"});
  CHECK(finished.end == sao::msg::RunEnd::kLearnerFailed);
  CHECK(finished.detail == "oom");
}

TEST_CASE("sao errors carry a code callers branch on and a text for people") {
  System s;
  const auto error = sao::msg::make_error(sao::msg::Errc::kRefused, "set min_batch: must be >= 1");
  CHECK(sao::msg::has_code(error, sao::msg::Errc::kRefused));
  CHECK_FALSE(sao::msg::has_code(error, sao::msg::Errc::kEnvFailed));
  CHECK_FALSE(sao::msg::has_code(caf::make_error(caf::sec::request_timeout), sao::msg::Errc::kRefused));
  CHECK(sao::msg::error_text(*s.system, error) == "set min_batch: must be >= 1");
  CHECK(s.system->render(error) == "sao.refused: set min_batch: must be >= 1");
  // The code survives a round trip through the serialiser (a cluster reply).
  auto back = round_trip(*s.system, error);
  CHECK(sao::msg::has_code(back, sao::msg::Errc::kRefused));
  CHECK(sao::msg::error_text(*s.system, back) == "set min_batch: must be >= 1");
}

TEST_CASE("the console's history survives the wire, nulls included") {
  System s;
  sao::report::MetricsHistory history;
  sao::report::MetricsLine line;
  line.numbers = {{"step", 7}, {"entropy", std::nan("")}};
  line.texts = {{"split", "test"}};
  line.flags = {{"eval", true}};
  history.steps = {line};
  history.has_latest = true;
  history.latest = line;
  history.knobs = {{"min_batch", 8}};
  auto back = round_trip(*s.system, history);
  REQUIRE(back.steps.size() == 1);
  CHECK(back.steps[0].numbers.at("step") == 7);
  CHECK(std::isnan(back.steps[0].numbers.at("entropy")));
  CHECK(back.latest.texts.at("split") == "test");
  CHECK(back.latest.flags.at("eval"));
  CHECK(back.knobs.at("min_batch") == 8);
}

TEST_CASE("a NaN accuracy survives the wire") {
  System s;
  auto trajectory = sample_trajectory();
  trajectory.accuracy = std::nan("");
  auto back = round_trip(*s.system, trajectory);
  CHECK(std::isnan(back.accuracy));
  CHECK(std::isnan(back.origin.regime_index));
}
