// The agent endpoint's untrusted bodies: a chat-completions request (read
// field by field; an accepted one is then answered as the endpoint would:
// its messages compared against themselves as echoed history, each text read
// for tool calls, a reply and a stream written) and a reward call.
#include "agent/openai_chat.hpp"
#include "fuzz_harness.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace sao_fuzz {

Surface agent_request_surface() {
  Surface surface;
  surface.name = "agent_request";
  surface.seeds = {
      R"({"model": "m", "user": "s1", "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
          "max_tokens": 64, "temperature": 1.0, "tools": [{"type": "function", "function": {"name": "calc",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}],
          "messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
                       {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "call_1",
                        "type": "function", "function": {"name": "calc", "arguments": "{\"expression\": \"2+2\"}"}}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "4"}]})",
      R"({"messages": [{"role": "user", "content": "hi"}], "n": 1, "stop": null, "tool_choice": "auto"})"};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto request = sao::agent::parse_chat_request(input);
    static const sao::tokenizer::ByteTokenizer tokenizer;
    for (const auto& message : request.messages) {
      if (!sao::agent::message_difference(message, message).empty())
        throw std::logic_error("a message differs from itself");
      const auto reply = sao::agent::assistant_reply(message.content, "call_f");
      sao::agent::TurnResult result;
      result.id = "chatcmpl-f";
      result.message = reply;
      for (const unsigned char byte : message.content.substr(0, 64)) {
        result.token_ids.push_back(byte);
        result.logprobs.push_back(-1.0F);
        result.versions.push_back(0);
      }
      sao::agent::completion_json(result, true, tokenizer).dump();
      sao::agent::completion_stream(result, true, true, tokenizer);
    }
    return Outcome::kAccepted;
  };
  return surface;
}

Surface agent_reward_surface() {
  Surface surface;
  surface.name = "agent_reward";
  surface.seeds = {R"({"reward": 1.0, "split": "test", "success": true})", R"({"rewards": [0, 0.5, 1e3]})"};
  surface.run = [](const std::string& input, const fs::path&) {
    sao::agent::parse_reward_request(input);
    return Outcome::kAccepted;
  };
  return surface;
}

}  // namespace sao_fuzz
