// Chat-template turns; see chat_tokenizer.hpp.
#include "tokenizer/chat_tokenizer.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <algorithm>

namespace sao::tokenizer {

namespace {
// Placeholders no real text contains (private-use code points around a name).
const std::string kAction = "\xEE\x80\x80sao-action\xEE\x80\x81";
const std::string kUser = "\xEE\x80\x80sao-user\xEE\x80\x81";
}  // namespace

ChatTokenizer::ChatTokenizer(std::shared_ptr<const HfTokenizer> tokenizer, ChatTemplate chat_template,
                             std::string where)
    : tokenizer_(std::move(tokenizer)), template_(std::move(chat_template)), where_(std::move(where)) {
  // The end-of-turn token: the special token right after an assistant's content.
  const auto closed =
      render({{{"role", "user"}, {"content", kUser}}, {{"role", "assistant"}, {"content", kAction}}}, false);
  const auto after = closed.find(kAction);
  if (after == std::string::npos)
    throw Error(where_ + ": the chat template does not write an assistant message's content");
  const auto tail = tokenizer_->encode_with_special_tokens(closed.substr(after + kAction.size()));
  if (!tail.empty() && tokenizer_->is_special(tail.front())) {
    end_of_turn_ = tail.front();
    end_of_turn_text_ = tokenizer_->token(end_of_turn_);
  } else {
    end_of_turn_ = tokenizer_->eos_id();  // a template that closes turns with plain text
  }
  if (end_of_turn_ < 0) throw Error(where_ + ": no end-of-turn token in the chat template and no eos_token");
  stop_ids_ = tokenizer_->stop_ids();
  if (std::find(stop_ids_.begin(), stop_ids_.end(), end_of_turn_) == stop_ids_.end())
    stop_ids_.insert(stop_ids_.begin(), end_of_turn_);
  first_turn("", "");  // a template that cannot render one user turn fails here, not mid-run
}

std::string ChatTokenizer::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json* tools) const {
  const auto bos = tokenizer_->bos_id();
  const auto eos = tokenizer_->eos_id();
  nlohmann::ordered_json variables = {{"messages", messages},
                                      {"add_generation_prompt", add_generation_prompt},
                                      {"bos_token", bos >= 0 ? tokenizer_->token(bos) : ""},
                                      {"eos_token", eos >= 0 ? tokenizer_->token(eos) : ""}};
  if (tools != nullptr) variables["tools"] = *tools;
  return template_.render(variables);
}

namespace {
// The placeholder standing for message `index`'s content.
std::string message_placeholder(size_t index) {
  return "\xEE\x80\x80sao-message-" + std::to_string(index) + "\xEE\x80\x81";
}

// `messages` with each content replaced by its placeholder, for the template.
nlohmann::ordered_json placeholder_messages(const std::vector<ChatTurnMessage>& messages) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    list.push_back({{"role", messages[i].role}, {"content", message_placeholder(i)}});
  }
  return list;
}
}  // namespace

std::vector<int64_t> ChatTokenizer::encode_around(const std::string& text,
                                                  const std::vector<ChatTurnMessage>& messages) const {
  std::vector<std::string> placeholders;
  for (size_t i = 0; i < messages.size(); ++i) placeholders.push_back(message_placeholder(i));
  const std::string_view prefix = "\xEE\x80\x80sao-message-";
  std::vector<std::string_view> parts;
  const std::string_view whole(text);
  size_t begin = 0;
  size_t search = 0;
  for (;;) {
    const auto found = text.find(prefix, search);
    if (found == std::string::npos) break;
    // Which message's placeholder starts here (a template may write a content twice, or not at all).
    size_t length = 0;
    size_t which = 0;
    for (size_t i = 0; i < placeholders.size(); ++i) {
      if (text.compare(found, placeholders[i].size(), placeholders[i]) == 0) {
        length = placeholders[i].size();
        which = i;
        break;
      }
    }
    if (length == 0) {
      search = found + prefix.size();
      continue;
    }
    parts.push_back(whole.substr(begin, found - begin));
    parts.push_back(messages[which].content);
    begin = found + length;
    search = begin;
  }
  parts.push_back(whole.substr(begin));
  return tokenizer_->encode_template(parts);
}

std::vector<int64_t> ChatTokenizer::first_turn(std::string_view observation, std::string_view tools_json) const {
  return first_turn_messages({{"user", std::string(observation)}}, tools_json, where_ + ": the environment's tools");
}

std::vector<int64_t> ChatTokenizer::first_turn_messages(const std::vector<ChatTurnMessage>& messages,
                                                        std::string_view tools_json, const std::string& where) const {
  check_turn_messages(messages, where);
  const auto list = placeholder_messages(messages);
  std::string text = render(list, true);
  if (!tools_json.empty()) {
    const nlohmann::ordered_json tools = base::parse_json_limited(tools_json, where);
    if (!tools.is_array()) throw Error(where + ": must be a JSON list of tool schemas, got " + tools.type_name());
    for (const auto& tool : tools) {
      if (!tool.is_object()) throw Error(where + ": every tool must be a JSON object, got " + tool.type_name());
    }
    auto with_tools = render(list, true, &tools);
    // A template without a tools section would drop them silently, and the policy would call tools it was never shown.
    if (!tools.empty() && with_tools == text) {
      throw Error(where + ": the chat template ignores `tools`, so the policy would never see them");
    }
    text = std::move(with_tools);
  }
  auto ids = encode_around(text, messages);
  if (ids.empty()) throw Error(where_ + ": the chat template renders an empty first turn");
  return ids;
}

std::vector<int64_t> ChatTokenizer::next_turn(std::string_view observation, Speaker speaker, bool action_closed) const {
  return next_turn_messages({{speaker == Speaker::kTool ? "tool" : "user", std::string(observation)}}, action_closed,
                            where_);
}

std::vector<int64_t> ChatTokenizer::next_turn_messages(const std::vector<ChatTurnMessage>& messages, bool action_closed,
                                                       const std::string& where) const {
  check_turn_messages(messages, where);
  nlohmann::ordered_json list = {{{"role", "user"}, {"content", kUser}}, {{"role", "assistant"}, {"content", kAction}}};
  for (auto& message : placeholder_messages(messages)) list.push_back(std::move(message));
  const auto text = render(list, true);
  const auto after = text.find(kAction);
  if (after == std::string::npos)
    throw Error(where_ + ": the chat template does not write an assistant message's content");
  std::string tail = text.substr(after + kAction.size());
  // The policy generated the end-of-turn token itself.
  if (action_closed && !end_of_turn_text_.empty() && tail.compare(0, end_of_turn_text_.size(), end_of_turn_text_) == 0)
    tail.erase(0, end_of_turn_text_.size());
  auto ids = encode_around(tail, messages);
  if (ids.empty()) ids = tokenizer_->encode("\n");
  return ids;
}

}  // namespace sao::tokenizer
