// Chat-template turns; see chat_tokenizer.hpp.
#include "tokenizer/chat_tokenizer.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <algorithm>

namespace sao::tokenizer {

namespace {
// Placeholders no real text contains (private-use code points around a name).
const std::string kObservation = "\xEE\x80\x80sao-observation\xEE\x80\x81";
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

std::vector<int64_t> ChatTokenizer::encode_around(const std::string& text, std::string_view observation) const {
  std::vector<std::string_view> parts;
  const std::string_view whole(text);
  size_t begin = 0;
  for (;;) {
    const auto found = text.find(kObservation, begin);
    parts.push_back(whole.substr(begin, found == std::string::npos ? std::string::npos : found - begin));
    if (found == std::string::npos) break;
    parts.push_back(observation);
    begin = found + kObservation.size();
  }
  return tokenizer_->encode_template(parts);
}

std::vector<int64_t> ChatTokenizer::first_turn(std::string_view observation, std::string_view tools_json) const {
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", kObservation}}};
  std::string text = render(messages, true);
  if (!tools_json.empty()) {
    const auto where = where_ + ": the environment's tools";
    const nlohmann::ordered_json tools = base::parse_json_limited(tools_json, where);
    if (!tools.is_array()) throw Error(where + ": must be a JSON list of tool schemas, got " + tools.type_name());
    for (const auto& tool : tools) {
      if (!tool.is_object()) throw Error(where + ": every tool must be a JSON object, got " + tool.type_name());
    }
    auto with_tools = render(messages, true, &tools);
    // A template without a tools section would drop them silently, and the policy would call tools it was never shown.
    if (!tools.empty() && with_tools == text) {
      throw Error(where + ": the chat template ignores `tools`, so the policy would never see them");
    }
    text = std::move(with_tools);
  }
  auto ids = encode_around(text, observation);
  if (ids.empty()) throw Error(where_ + ": the chat template renders an empty first turn");
  return ids;
}

std::vector<int64_t> ChatTokenizer::next_turn(std::string_view observation, Speaker speaker, bool action_closed) const {
  const auto text = render({{{"role", "user"}, {"content", kUser}},
                            {{"role", "assistant"}, {"content", kAction}},
                            {{"role", speaker == Speaker::kTool ? "tool" : "user"}, {"content", kObservation}}},
                           true);
  const auto after = text.find(kAction);
  if (after == std::string::npos)
    throw Error(where_ + ": the chat template does not write an assistant message's content");
  std::string tail = text.substr(after + kAction.size());
  // The policy generated the end-of-turn token itself.
  if (action_closed && !end_of_turn_text_.empty() && tail.compare(0, end_of_turn_text_.size(), end_of_turn_text_) == 0)
    tail.erase(0, end_of_turn_text_.size());
  auto ids = encode_around(tail, observation);
  if (ids.empty()) ids = tokenizer_->encode("\n");
  return ids;
}

}  // namespace sao::tokenizer
