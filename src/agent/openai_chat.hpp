// The OpenAI chat-completions wire format, as the agent endpoint speaks it
// (actors/agent/): requests read and checked field by field, replies and
// stream chunks written, and the policy's text read into tool calls. Pure
// functions over JSON text, so the format is tested and fuzzed without a
// server or a model.
//
// What the endpoint accepts is what it can honour without changing the
// distribution the learner trains on: one choice (n = 1), the run's own
// temperature and top_p (a caller's other value is refused, since the
// recorded log-probs would belong to another policy), no penalties, no
// stop strings (a turn ends at the model's end-of-turn token), text
// content only. Any field it does not know is refused by name, so a caller
// never believes a setting took effect when it did not.
#pragma once

#include "base/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sao::tokenizer {
class Tokenizer;
}

namespace sao::agent {

// A request the endpoint refuses: the HTTP status and the reason for the caller.
struct RequestError : Error {
  RequestError(int status_code, const std::string& message) : Error(message), status(status_code) {}
  int status;
};

// A tool call the policy wrote, as the API shows it.
struct ToolCall {
  std::string id;  // "call_..." (the endpoint names them; a caller echoes them back)
  std::string name;
  std::string arguments;  // JSON text of an object
};

// One message of a conversation.
struct ChatMessage {
  std::string role;  // "system" ("developer" is read as system), "user", "assistant" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only ("" when not given)
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::string tools_json;  // "" or the JSON list of tool schemas
  std::optional<double> temperature;
  std::optional<double> top_p;
  int64_t max_tokens = 0;  // 0: not given
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  std::string user;
};

// Reads a POST /v1/chat/completions body. Throws RequestError (400) naming
// the field and what was wrong: not JSON, a wrong type, a value the
// endpoint cannot honour (above), an unknown field.
ChatRequest parse_chat_request(std::string_view body);

// A session id: 1-128 bytes of letters, digits and ".-_:". Throws
// RequestError (400) naming `where` otherwise.
void check_session_id(const std::string& session, const std::string& where);

// The policy's text as the caller sees it. Hermes-style calls (Qwen's
// "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>") become
// tool calls named `id_prefix`_0, _1, ...; the text before the first call
// is the content. A call whose JSON is not an object with a string "name"
// leaves the whole text as content (the policy's mistake, for the agent to
// see), never an error.
ChatMessage assistant_reply(const std::string& text, const std::string& id_prefix);

// Whether `sent` (a message a caller sends back) is `recorded` (the message
// as the endpoint saw or wrote it): "" when it is, else why not. Contents
// compare as text (null and "" alike), tool calls by id, name and arguments
// as JSON values (key order and spacing may differ).
std::string message_difference(const ChatMessage& recorded, const ChatMessage& sent);

// What one turn produced, for the reply.
struct TurnResult {
  std::string id;  // "chatcmpl-..."
  std::string model;
  int64_t created_unix_s = 0;
  ChatMessage message;  // the assistant's reply (assistant_reply of the text)
  bool closed = true;   // ended on the end-of-turn token (false: cut at max_tokens)
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;
  std::vector<int64_t> versions;
  int64_t prompt_tokens = 0;  // the context the turn was sampled after
  std::string session;
  int64_t turn = 0;  // 0-based
};

// "tool_calls", "stop" or "length".
std::string finish_reason(const TurnResult& result);
// The chat.completion object. `with_logprobs` adds choices[0].logprobs.content
// (each token's text, log-prob and bytes, decoded with `tokenizer`); every
// reply carries "sao": {session, turn, token_ids, logprobs, policy_versions},
// the exact ids the learner will train on.
nlohmann::ordered_json completion_json(const TurnResult& result, bool with_logprobs,
                                       const tokenizer::Tokenizer& tokenizer);
// The same turn as a server-sent-event stream: chat.completion.chunk events
// (role, content, tool calls, the finish reason, usage when asked) and
// "data: [DONE]".
std::string completion_stream(const TurnResult& result, bool with_logprobs, bool include_usage,
                              const tokenizer::Tokenizer& tokenizer);

// POST /v1/episodes/{id}/reward: {"reward": r} or {"rewards": [r per turn]},
// optional "split": "train" (default) or "test", optional "success": bool.
struct RewardRequest {
  std::vector<double> turn_rewards;  // one value: the outcome, on the last turn; several: one per turn
  bool held_out = false;             // split "test"
  int8_t success = -1;               // "success": 1 / 0; -1 when not given
};
// Throws RequestError (400) naming the field.
RewardRequest parse_reward_request(std::string_view body);

}  // namespace sao::agent
