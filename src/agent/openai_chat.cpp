// The chat-completions wire format; see openai_chat.hpp.
#include "agent/openai_chat.hpp"

#include "base/json_parse.hpp"
#include "base/utf8.hpp"
#include "tokenizer/tokenizer.hpp"

#include <cmath>
#include <set>

namespace sao::agent {

namespace {
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& message) {
  throw RequestError(400, message);
}

std::string type_of(const Json& value) {
  return value.type_name();
}

// A message's content: a string, null (an assistant that only calls tools),
// or a list of {"type": "text", "text": ...} parts, joined.
std::string content_of(const Json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse(where + ": must be a string, null or a list of text parts, got " + type_of(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const auto part_where = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      refuse(part_where + ": must be an object with a \"type\"");
    if (part["type"] != "text")
      refuse(part_where + ": only text parts are supported, got type \"" + part["type"].get<std::string>() + "\"");
    if (!part.contains("text") || !part["text"].is_string()) refuse(part_where + ".text: must be a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ToolCall> tool_calls_of(const Json& calls, const std::string& where) {
  std::vector<ToolCall> result;
  if (calls.is_null()) return result;
  if (!calls.is_array()) refuse(where + ": must be a list, got " + type_of(calls));
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    const auto call_where = where + "[" + std::to_string(i) + "]";
    if (!call.is_object()) refuse(call_where + ": must be an object");
    for (const auto& [key, value] : call.items()) {
      if (key != "id" && key != "type" && key != "function" && key != "index")
        refuse(call_where + ": unknown field '" + key + "'");
    }
    if (call.contains("type") && call["type"] != "function") refuse(call_where + ".type: must be \"function\"");
    if (!call.contains("function") || !call["function"].is_object())
      refuse(call_where + ".function: must be an object");
    const auto& function = call["function"];
    if (!function.contains("name") || !function["name"].is_string())
      refuse(call_where + ".function.name: must be a string");
    ToolCall parsed;
    parsed.name = function["name"].get<std::string>();
    if (call.contains("id")) {
      if (!call["id"].is_string()) refuse(call_where + ".id: must be a string");
      parsed.id = call["id"].get<std::string>();
    }
    if (function.contains("arguments")) {
      const auto& arguments = function["arguments"];
      if (arguments.is_string()) {
        parsed.arguments = arguments.get<std::string>();
      } else if (arguments.is_object()) {
        parsed.arguments = base::dump_json(arguments);
      } else {
        refuse(call_where + ".function.arguments: must be a JSON string or an object");
      }
    }
    result.push_back(std::move(parsed));
  }
  return result;
}

ChatMessage message_of(const Json& message, const std::string& where) {
  if (!message.is_object()) refuse(where + ": must be an object, got " + type_of(message));
  if (!message.contains("role") || !message["role"].is_string()) refuse(where + ".role: must be a string");
  ChatMessage parsed;
  parsed.role = message["role"].get<std::string>();
  if (parsed.role == "developer") parsed.role = "system";
  if (parsed.role != "system" && parsed.role != "user" && parsed.role != "assistant" && parsed.role != "tool")
    refuse(where + ".role: must be system, developer, user, assistant or tool, got \"" + parsed.role + "\"");
  for (const auto& [key, value] : message.items()) {
    if (key == "role" || key == "content" || key == "name") continue;
    if (key == "tool_calls" && parsed.role == "assistant") continue;
    if (key == "tool_call_id" && parsed.role == "tool") continue;
    // What a client library writes back for an assistant message it received (all empty).
    const bool empty_echo = value.is_null() || (value.is_array() && value.empty());
    if (parsed.role == "assistant" && empty_echo &&
        (key == "refusal" || key == "function_call" || key == "audio" || key == "annotations"))
      continue;
    refuse(where + ": unknown field '" + key + "' for a " + parsed.role + " message");
  }
  if (message.contains("name") && !message["name"].is_string()) refuse(where + ".name: must be a string");
  const Json content = message.contains("content") ? message["content"] : Json(nullptr);
  parsed.content = content_of(content, where + ".content");
  if (parsed.role == "assistant" && message.contains("tool_calls"))
    parsed.tool_calls = tool_calls_of(message["tool_calls"], where + ".tool_calls");
  if (parsed.role != "assistant" && !content.is_string() && !content.is_array())
    refuse(where + ".content: a " + parsed.role + " message needs content");
  if (message.contains("tool_call_id")) {
    if (!message["tool_call_id"].is_string()) refuse(where + ".tool_call_id: must be a string");
    parsed.tool_call_id = message["tool_call_id"].get<std::string>();
  }
  return parsed;
}

void check_tools(const Json& tools) {
  if (!tools.is_array()) refuse("tools: must be a list, got " + type_of(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& tool = tools[i];
    const auto where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object() || tool.value("type", Json()) != "function")
      refuse(where + ": must be an object with \"type\": \"function\"");
    if (!tool.contains("function") || !tool["function"].is_object()) refuse(where + ".function: must be an object");
    const auto& function = tool["function"];
    if (!function.contains("name") || !function["name"].is_string()) refuse(where + ".function.name: must be a string");
  }
}

double finite_number(const Json& value, const std::string& where) {
  if (!value.is_number()) refuse(where + ": must be a number, got " + type_of(value));
  const auto number = value.get<double>();
  if (!std::isfinite(number)) refuse(where + ": must be finite");
  return number;
}

// A body as a JSON object (depth- and size-limited), or the reason it is not one.
Json request_object(std::string_view body) {
  Json document;
  try {
    document = base::parse_json_limited(body, "the request body");
  } catch (const Error& error) {
    refuse(error.what());
  }
  if (!document.is_object()) refuse("the request body must be a JSON object, got " + type_of(document));
  return document;
}

bool boolean(const Json& value, const std::string& where) {
  if (!value.is_boolean()) refuse(where + ": must be true or false, got " + type_of(value));
  return value.get<bool>();
}
}  // namespace

ChatRequest parse_chat_request(std::string_view body) {
  const Json document = request_object(body);
  ChatRequest request;
  bool has_messages = false;
  for (const auto& [key, value] : document.items()) {
    if (key == "model") {
      if (!value.is_string()) refuse("model: must be a string");
      request.model = value.get<std::string>();
    } else if (key == "messages") {
      if (!value.is_array() || value.empty()) refuse("messages: must be a non-empty list");
      for (size_t i = 0; i < value.size(); ++i)
        request.messages.push_back(message_of(value[i], "messages[" + std::to_string(i) + "]"));
      has_messages = true;
    } else if (key == "tools") {
      if (value.is_null()) continue;
      check_tools(value);
      if (!value.empty()) request.tools_json = base::dump_json(value);
    } else if (key == "tool_choice") {
      if (!value.is_null() && value != "auto")
        refuse("tool_choice: only \"auto\" is supported (the policy decides whether to call a tool)");
    } else if (key == "parallel_tool_calls") {
      boolean(value, key);
    } else if (key == "temperature") {
      if (!value.is_null()) request.temperature = finite_number(value, key);
    } else if (key == "top_p") {
      if (!value.is_null()) request.top_p = finite_number(value, key);
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (value.is_null()) continue;
      if (!value.is_number_integer() || value.get<int64_t>() < 1) refuse(key + ": must be an integer >= 1");
      request.max_tokens = value.get<int64_t>();
    } else if (key == "n") {
      if (!value.is_null() && value != 1) refuse("n: must be 1 (one rollout per prompt)");
    } else if (key == "stream") {
      if (!value.is_null()) request.stream = boolean(value, key);
    } else if (key == "stream_options") {
      if (value.is_null()) continue;
      if (!value.is_object()) refuse("stream_options: must be an object");
      for (const auto& [option, setting] : value.items()) {
        if (option != "include_usage") refuse("stream_options: unknown field '" + option + "'");
        request.include_usage = boolean(setting, "stream_options.include_usage");
      }
    } else if (key == "logprobs") {
      if (!value.is_null()) request.logprobs = boolean(value, key);
    } else if (key == "top_logprobs") {
      if (!value.is_null() && value != 0)
        refuse("top_logprobs: must be 0 (the endpoint returns the sampled tokens' log-probs only)");
    } else if (key == "stop") {
      const bool none = value.is_null() || (value.is_array() && value.empty()) || value == "";
      if (!none) refuse("stop: stop sequences are not supported (a turn ends at the model's end-of-turn token)");
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      if (!value.is_null() && finite_number(value, key) != 0.0)
        refuse(key + ": must be 0 (a penalty changes the distribution the learner trains on)");
    } else if (key == "user") {
      if (!value.is_string()) refuse("user: must be a string");
      request.user = value.get<std::string>();
    } else if (key == "seed") {
      // The run's sampler draws every turn (rollout seeds), so a caller's seed cannot apply.
      if (!value.is_null()) refuse("seed: not supported (the run's sampler seeds every turn)");
    } else if (key == "response_format") {
      if (!value.is_null() && !(value.is_object() && value.value("type", Json()) == "text" && value.size() == 1))
        refuse("response_format: only {\"type\": \"text\"} is supported");
    } else if (key == "metadata" || key == "store") {
      // Bookkeeping fields of the hosted API with no effect on sampling.
    } else {
      refuse("unknown field '" + key + "'");
    }
  }
  if (!has_messages) refuse("messages: required");
  return request;
}

void check_session_id(const std::string& session, const std::string& where) {
  if (session.empty() || session.size() > 128)
    throw RequestError(400, where + ": a session id is 1-128 bytes, got " + std::to_string(session.size()));
  for (const char c : session) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_' || c == ':';
    if (!ok)
      throw RequestError(400,
                         where + ": a session id holds letters, digits and .-_: only, got " + base::quoted_byte(c));
  }
}

ChatMessage assistant_reply(const std::string& text, const std::string& id_prefix) {
  ChatMessage reply;
  reply.role = "assistant";
  reply.content = text;
  const std::string open = "<tool_call>";
  const std::string close = "</tool_call>";
  const auto first = text.find(open);
  if (first == std::string::npos) return reply;
  std::vector<ToolCall> calls;
  size_t position = first;
  while (position != std::string::npos) {
    const auto end = text.find(close, position);
    if (end == std::string::npos) return reply;  // an unclosed call: the text stands
    const auto body = text.substr(position + open.size(), end - position - open.size());
    Json call;
    try {
      call = base::parse_json_limited(body, "tool call");
    } catch (const Error&) {
      return reply;
    }
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return reply;
    const Json arguments = call.contains("arguments") ? call["arguments"] : Json::object();
    if (!arguments.is_object()) return reply;
    calls.push_back(
        {id_prefix + "_" + std::to_string(calls.size()), call["name"].get<std::string>(), base::dump_json(arguments)});
    position = text.find_first_not_of(" \t\r\n", end + close.size());
    if (position != std::string::npos && text.compare(position, open.size(), open) != 0)
      return reply;  // text after the calls: not a call turn the template would write back
  }
  std::string content = text.substr(0, first);
  // The template writes "\n" between content and a call.
  while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.pop_back();
  reply.content = std::move(content);
  reply.tool_calls = std::move(calls);
  return reply;
}

namespace {
// A JSON text as a value, or the text itself when it is not JSON.
Json arguments_value(const std::string& text) {
  try {
    return base::parse_json_limited(text, "arguments");
  } catch (const Error&) {
    return Json(text);
  }
}
}  // namespace

std::string message_difference(const ChatMessage& recorded, const ChatMessage& sent) {
  if (recorded.role != sent.role) return "role is \"" + sent.role + "\", expected \"" + recorded.role + "\"";
  if (recorded.content != sent.content) {
    return "content differs (expected " + base::quoted_excerpt(recorded.content, 80) + ", got " +
           base::quoted_excerpt(sent.content, 80) + ")";
  }
  if (recorded.tool_calls.size() != sent.tool_calls.size()) {
    return std::to_string(sent.tool_calls.size()) + " tool calls, expected " +
           std::to_string(recorded.tool_calls.size());
  }
  for (size_t i = 0; i < recorded.tool_calls.size(); ++i) {
    const auto& want = recorded.tool_calls[i];
    const auto& got = sent.tool_calls[i];
    const auto where = "tool_calls[" + std::to_string(i) + "]";
    if (!got.id.empty() && got.id != want.id) return where + ".id is \"" + got.id + "\", expected \"" + want.id + "\"";
    if (got.name != want.name) return where + ".function.name is \"" + got.name + "\", expected \"" + want.name + "\"";
    if (arguments_value(got.arguments) != arguments_value(want.arguments)) return where + ".function.arguments differ";
  }
  if (recorded.tool_call_id != sent.tool_call_id) return "tool_call_id differs";
  return "";
}

std::string finish_reason(const TurnResult& result) {
  if (!result.message.tool_calls.empty()) return "tool_calls";
  return result.closed ? "stop" : "length";
}

namespace {
OrderedJson tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    OrderedJson call;
    if (with_index) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(std::move(call));
  }
  return list;
}

OrderedJson logprobs_json(const TurnResult& result, const tokenizer::Tokenizer& tokenizer) {
  OrderedJson content = OrderedJson::array();
  for (size_t i = 0; i < result.token_ids.size(); ++i) {
    const auto text = base::replace_invalid_utf8(tokenizer.decode({result.token_ids[i]}));
    OrderedJson bytes = OrderedJson::array();
    for (const unsigned char byte : text) bytes.push_back(static_cast<int>(byte));
    content.push_back({{"token", text},
                       {"logprob", result.logprobs.at(i)},
                       {"bytes", std::move(bytes)},
                       {"top_logprobs", OrderedJson::array()}});
  }
  return {{"content", std::move(content)}};
}

OrderedJson usage_json(const TurnResult& result) {
  const auto completion = static_cast<int64_t>(result.token_ids.size());
  return {{"prompt_tokens", result.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", result.prompt_tokens + completion}};
}

OrderedJson sao_json(const TurnResult& result) {
  return {{"session", result.session},
          {"turn", result.turn},
          {"token_ids", result.token_ids},
          {"logprobs", result.logprobs},
          {"policy_versions", result.versions}};
}

// "data: {...}\n\n"
std::string event(const OrderedJson& chunk) {
  return "data: " + base::dump_json(chunk) + "\n\n";
}
}  // namespace

nlohmann::ordered_json completion_json(const TurnResult& result, bool with_logprobs,
                                       const tokenizer::Tokenizer& tokenizer) {
  OrderedJson message = {{"role", "assistant"}};
  const bool calls = !result.message.tool_calls.empty();
  message["content"] =
      calls && result.message.content.empty() ? OrderedJson(nullptr) : OrderedJson(result.message.content);
  if (calls) message["tool_calls"] = tool_calls_json(result.message.tool_calls, false);
  OrderedJson choice = {{"index", 0}, {"message", std::move(message)}};
  choice["logprobs"] = with_logprobs ? logprobs_json(result, tokenizer) : OrderedJson(nullptr);
  choice["finish_reason"] = finish_reason(result);
  return {{"id", result.id},
          {"object", "chat.completion"},
          {"created", result.created_unix_s},
          {"model", result.model},
          {"choices", OrderedJson::array({std::move(choice)})},
          {"usage", usage_json(result)},
          {"sao", sao_json(result)}};
}

std::string completion_stream(const TurnResult& result, bool with_logprobs, bool include_usage,
                              const tokenizer::Tokenizer& tokenizer) {
  const OrderedJson head = {{"id", result.id},
                            {"object", "chat.completion.chunk"},
                            {"created", result.created_unix_s},
                            {"model", result.model}};
  auto chunk = [&](OrderedJson delta, OrderedJson logprobs, OrderedJson finish) {
    OrderedJson value = head;
    value["choices"] = OrderedJson::array(
        {{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}}});
    return value;
  };
  std::string stream = event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
  if (!result.message.content.empty()) {
    stream += event(chunk({{"content", result.message.content}},
                          with_logprobs ? logprobs_json(result, tokenizer) : OrderedJson(nullptr), nullptr));
  } else if (with_logprobs) {
    stream += event(chunk(OrderedJson::object(), logprobs_json(result, tokenizer), nullptr));
  }
  if (!result.message.tool_calls.empty())
    stream += event(chunk({{"tool_calls", tool_calls_json(result.message.tool_calls, true)}}, nullptr, nullptr));
  auto last = chunk(OrderedJson::object(), nullptr, finish_reason(result));
  last["sao"] = sao_json(result);
  stream += event(last);
  if (include_usage) {
    OrderedJson usage = head;
    usage["choices"] = OrderedJson::array();
    usage["usage"] = usage_json(result);
    stream += event(usage);
  }
  return stream + "data: [DONE]\n\n";
}

RewardRequest parse_reward_request(std::string_view body) {
  const Json document = request_object(body);
  RewardRequest request;
  for (const auto& [key, value] : document.items()) {
    if (key == "reward") {
      request.turn_rewards = {finite_number(value, "reward")};
    } else if (key == "rewards") {
      if (!value.is_array() || value.empty()) refuse("rewards: must be a non-empty list of numbers, one per turn");
      for (size_t i = 0; i < value.size(); ++i)
        request.turn_rewards.push_back(finite_number(value[i], "rewards[" + std::to_string(i) + "]"));
    } else if (key == "split") {
      if (value != "train" && value != "test") refuse("split: must be \"train\" or \"test\"");
      request.held_out = value == "test";
    } else if (key == "success") {
      request.success = boolean(value, "success") ? 1 : 0;
    } else {
      refuse("unknown field '" + key + "'");
    }
  }
  if (document.contains("reward") && document.contains("rewards")) refuse("give reward or rewards, not both");
  if (request.turn_rewards.empty()) refuse("reward: required (a number), or rewards (one per turn)");
  return request;
}

}  // namespace sao::agent
