// The agent endpoint's wire format (agent/openai_chat.hpp): requests read
// field by field with the reason for each refusal, the policy's text read
// into tool calls as the OpenAI API shows them, echoed history compared,
// and the reply and stream written in the API's shape (the fields the
// official clients read).
#include "agent/openai_chat.hpp"
#include "tokenizer/byte_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace {
using sao::agent::ChatMessage;
using sao::agent::parse_chat_request;
using sao::agent::RequestError;

// The reason a body is refused with 400 ("" when it is accepted).
std::string refusal(const std::string& body) {
  try {
    parse_chat_request(body);
  } catch (const RequestError& error) {
    CHECK(error.status == 400);
    return error.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a chat request is read with its messages, tools and settings") {
  const auto request = parse_chat_request(R"({
    "model": "m", "user": "s1", "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "max_tokens": 64, "temperature": 1.0, "top_p": 1, "n": 1, "tool_choice": "auto",
    "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
    "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "2+"}, {"type": "text", "text": "2?"}]},
      {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "4"}]})");
  CHECK(request.model == "m");
  CHECK(request.user == "s1");
  CHECK(request.stream);
  CHECK(request.include_usage);
  CHECK(request.logprobs);
  CHECK(request.max_tokens == 64);
  CHECK(*request.temperature == 1.0);
  CHECK(*request.top_p == 1.0);
  CHECK(nlohmann::json::parse(request.tools_json)[0]["function"]["name"] == "calc");
  REQUIRE(request.messages.size() == 4);
  CHECK(request.messages[0].role == "system");  // developer is the system's voice
  CHECK(request.messages[1].content == "2+2?");
  CHECK(request.messages[2].content.empty());
  REQUIRE(request.messages[2].tool_calls.size() == 1);
  CHECK(request.messages[2].tool_calls[0].id == "call_1");
  CHECK(request.messages[2].tool_calls[0].arguments == "{\"x\": 1}");
  CHECK(request.messages[3].tool_call_id == "call_1");
  // max_completion_tokens is the newer name.
  CHECK(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5})")
            .max_tokens == 5);
}

TEST_CASE("a chat request the endpoint cannot honour is refused by field") {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  CHECK(refusal("{" + user + "}").empty());
  CHECK(refusal("{" + user + R"(, "frobnicate": 1})") == "unknown field 'frobnicate'");
  CHECK(refusal("{" + user + R"(, "n": 2})") == "n: must be 1 (one rollout per prompt)");
  CHECK(refusal("{" + user + R"(, "stop": ["\n"]})") ==
        "stop: stop sequences are not supported (a turn ends at the model's end-of-turn token)");
  CHECK(refusal("{" + user + R"(, "stop": null})").empty());
  CHECK(refusal("{" + user + R"(, "presence_penalty": 0.5})") ==
        "presence_penalty: must be 0 (a penalty changes the distribution the learner trains on)");
  CHECK(refusal("{" + user + R"(, "top_logprobs": 3})") ==
        "top_logprobs: must be 0 (the endpoint returns the sampled tokens' log-probs only)");
  CHECK(refusal("{" + user + R"(, "seed": 3})") == "seed: not supported (the run's sampler seeds every turn)");
  CHECK(refusal("{" + user + R"(, "max_tokens": 0})") == "max_tokens: must be an integer >= 1");
  CHECK(refusal("{" + user + R"(, "temperature": "hot"})") == "temperature: must be a number, got string");
  CHECK(refusal("{" + user + R"(, "tool_choice": "required"})") ==
        "tool_choice: only \"auto\" is supported (the policy decides whether to call a tool)");
  CHECK(refusal("{" + user + R"(, "tools": [{"type": "retrieval"}]})") ==
        "tools[0]: must be an object with \"type\": \"function\"");
  CHECK(refusal(R"({"model": "m"})") == "messages: required");
  CHECK(refusal(R"({"messages": []})") == "messages: must be a non-empty list");
  CHECK(refusal(R"({"messages": [{"role": "robot", "content": "x"}]})") ==
        "messages[0].role: must be system, developer, user, assistant or tool, got \"robot\"");
  CHECK(refusal(R"({"messages": [{"role": "user"}]})") == "messages[0].content: a user message needs content");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})") ==
        "messages[0].content[0]: only text parts are supported, got type \"image_url\"");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})") ==
        "messages[0]: unknown field 'tool_calls' for a user message");
  CHECK(refusal(R"({"messages": [{"role": "assistant", "content": "x", "refusal": "no"}]})") ==
        "messages[0]: unknown field 'refusal' for a assistant message");
  CHECK(refusal(R"([1, 2])") == "the request body must be a JSON object, got array");
  CHECK(refusal("{\"messages\": ").rfind("the request body: not valid JSON", 0) == 0);
}

TEST_CASE("the policy's text becomes tool calls in the API's shape, or stays text") {
  const auto reply = sao::agent::assistant_reply(
      "Let me add.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+2\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"now\"}</tool_call>",
      "call_s_0");
  CHECK(reply.role == "assistant");
  CHECK(reply.content == "Let me add.");
  REQUIRE(reply.tool_calls.size() == 2);
  CHECK(reply.tool_calls[0].id == "call_s_0_0");
  CHECK(reply.tool_calls[0].name == "calc");
  CHECK(reply.tool_calls[0].arguments == "{\"expression\":\"2+2\"}");
  CHECK(reply.tool_calls[1].id == "call_s_0_1");
  CHECK(reply.tool_calls[1].arguments == "{}");
  // The policy's mistakes are the agent's to see, as text.
  for (const std::string text :
       {"<tool_call>{\"name\": 3}</tool_call>", "<tool_call>{not json}</tool_call>", "<tool_call>{\"name\": \"calc\"}",
        "<tool_call>{\"name\": \"c\"}</tool_call> and more"}) {
    const auto kept = sao::agent::assistant_reply(text, "id");
    CHECK(kept.content == text);
    CHECK(kept.tool_calls.empty());
  }
}

TEST_CASE("echoed history is compared as the endpoint recorded it") {
  const auto recorded = sao::agent::assistant_reply(
      "<tool_call>{\"name\": \"calc\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>", "call_s_0");
  auto echoed = recorded;
  echoed.tool_calls[0].arguments = "{ \"b\": 2, \"a\": 1 }";  // another spelling of the same arguments
  CHECK(sao::agent::message_difference(recorded, echoed).empty());
  echoed.tool_calls[0].id.clear();  // a client that leaves ids out
  CHECK(sao::agent::message_difference(recorded, echoed).empty());
  echoed.tool_calls[0].arguments = "{\"a\": 1, \"b\": 3}";
  CHECK(sao::agent::message_difference(recorded, echoed) == "tool_calls[0].function.arguments differ");
  ChatMessage edited{"assistant", "Sure!", {}, ""};
  CHECK(sao::agent::message_difference(ChatMessage{"assistant", "Sure", {}, ""}, edited) ==
        "content differs (expected 'Sure', got 'Sure!')");
  CHECK(sao::agent::message_difference(ChatMessage{"user", "x", {}, ""}, ChatMessage{"system", "x", {}, ""}) ==
        "role is \"system\", expected \"user\"");
}

TEST_CASE("a turn is written as a chat.completion and as chat.completion.chunk events") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::agent::TurnResult result;
  result.id = "chatcmpl-s-1";
  result.model = "tiny";
  result.created_unix_s = 1700000000;
  result.message = sao::agent::assistant_reply("ok", "call_s_1");
  result.closed = true;
  result.token_ids = {'o', 'k', tokenizer.eos_id()};
  result.logprobs = {-0.5F, -0.25F, -0.125F};
  result.versions = {4, 4, 5};
  result.prompt_tokens = 9;
  result.session = "s";
  result.turn = 1;
  const auto reply = sao::agent::completion_json(result, true, tokenizer);
  const auto expected = nlohmann::ordered_json::parse(R"({
    "id": "chatcmpl-s-1", "object": "chat.completion", "created": 1700000000, "model": "tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "logprobs": {"content": [
                   {"token": "o", "logprob": -0.5, "bytes": [111], "top_logprobs": []},
                   {"token": "k", "logprob": -0.25, "bytes": [107], "top_logprobs": []},
                   {"token": "<|eos|>", "logprob": -0.125, "bytes": [60, 124, 101, 111, 115, 124, 62],
                    "top_logprobs": []}]},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    "sao": {"session": "s", "turn": 1, "token_ids": [111, 107, 258], "logprobs": [-0.5, -0.25, -0.125],
            "policy_versions": [4, 4, 5]}})");
  CHECK(reply.dump() == expected.dump());

  result.closed = false;
  CHECK(sao::agent::finish_reason(result) == "length");
  result.message = sao::agent::assistant_reply("<tool_call>{\"name\": \"f\"}</tool_call>", "call_s_1");
  CHECK(sao::agent::finish_reason(result) == "tool_calls");
  const auto with_call = sao::agent::completion_json(result, false, tokenizer);
  CHECK(with_call["choices"][0]["message"]["content"].is_null());
  CHECK(with_call["choices"][0]["message"]["tool_calls"][0].dump() ==
        R"({"id":"call_s_1_0","type":"function","function":{"name":"f","arguments":"{}"}})");
  CHECK(with_call["choices"][0]["logprobs"].is_null());

  const auto stream = sao::agent::completion_stream(result, false, true, tokenizer);
  std::vector<nlohmann::json> events;
  size_t begin = 0;
  while (begin < stream.size()) {
    const auto end = stream.find("\n\n", begin);
    REQUIRE(end != std::string::npos);
    const auto line = stream.substr(begin, end - begin);
    REQUIRE(line.rfind("data: ", 0) == 0);
    if (line != "data: [DONE]") events.push_back(nlohmann::json::parse(line.substr(6)));
    begin = end + 2;
  }
  CHECK(stream.size() >= 14);
  CHECK(stream.substr(stream.size() - 14) == "data: [DONE]\n\n");
  REQUIRE(events.size() == 4);  // role, tool calls, finish, usage
  for (const auto& event : events) CHECK(event["object"] == "chat.completion.chunk");
  CHECK(events[0]["choices"][0]["delta"]["role"] == "assistant");
  CHECK(events[1]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0);
  CHECK(events[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f");
  CHECK(events[2]["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(events[2]["sao"]["token_ids"] == nlohmann::json({111, 107, 258}));
  CHECK(events[3]["choices"].empty());
  CHECK(events[3]["usage"]["total_tokens"] == 12);
}

TEST_CASE("a reward call is read with its split, or refused by field") {
  const auto one = sao::agent::parse_reward_request(R"({"reward": 1.5, "split": "test", "success": true})");
  CHECK(one.turn_rewards == std::vector<double>{1.5});
  CHECK(one.held_out);
  CHECK(one.success == 1);
  const auto per_turn = sao::agent::parse_reward_request(R"({"rewards": [0, 0.5, 1]})");
  CHECK(per_turn.turn_rewards == std::vector<double>{0.0, 0.5, 1.0});
  CHECK_FALSE(per_turn.held_out);
  CHECK(per_turn.success == -1);
  const auto refused = [](const std::string& body) {
    try {
      sao::agent::parse_reward_request(body);
    } catch (const RequestError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  CHECK(refused("{}") == "reward: required (a number), or rewards (one per turn)");
  CHECK(refused(R"({"reward": 1, "rewards": [1]})") == "give reward or rewards, not both");
  CHECK(refused(R"({"reward": "1"})") == "reward: must be a number, got string");
  CHECK(refused(R"({"reward": 1, "split": "valid"})") == "split: must be \"train\" or \"test\"");
  CHECK(refused(R"({"reward": 1, "bonus": 2})") == "unknown field 'bonus'");
  CHECK(refused(R"({"rewards": []})") == "rewards: must be a non-empty list of numbers, one per turn");
}

TEST_CASE("session ids are short and plain") {
  CHECK_NOTHROW(sao::agent::check_session_id("agent-7:ep_12.a", "X-Session-Id"));
  CHECK_THROWS_WITH_AS(sao::agent::check_session_id("", "user"), "user: a session id is 1-128 bytes, got 0",
                       RequestError);
  CHECK_THROWS_WITH_AS(sao::agent::check_session_id(std::string(129, 'a'), "user"),
                       "user: a session id is 1-128 bytes, got 129", RequestError);
  CHECK_THROWS_WITH_AS(sao::agent::check_session_id("a/b", "X-Session-Id"),
                       "X-Session-Id: a session id holds letters, digits and .-_: only, got '/'", RequestError);
}
