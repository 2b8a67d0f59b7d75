// sao's plain turn format, the Tokenizer defaults; see tokenizer.hpp.
#include "tokenizer/tokenizer.hpp"

#include "base/error.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>

namespace sao::tokenizer {

Speaker speaker_of(std::string_view role, const std::string& where) {
  if (role == "user") return Speaker::kUser;
  if (role == "tool") return Speaker::kTool;
  throw Error(where + ": role must be \"user\" or \"tool\", got \"" + std::string(role) + "\"");
}

std::vector<int64_t> Tokenizer::first_turn(std::string_view observation, std::string_view /*tools_json*/) const {
  auto ids = sequence_start(*this);
  const auto text = encode_observation(*this, observation);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

std::vector<int64_t> Tokenizer::next_turn(std::string_view observation, Speaker /*speaker*/,
                                          bool /*action_closed*/) const {
  return encode_observation(*this, observation);
}

void check_turn_messages(const std::vector<ChatTurnMessage>& messages, const std::string& where) {
  if (messages.empty()) throw Error(where + ": a turn needs at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "tool") {
      throw Error(where + ": message " + std::to_string(i) + " has role \"" + role +
                  "\"; a turn's messages are the system's, the user's or a tool's");
    }
  }
}

namespace {
std::string joined_contents(const std::vector<ChatTurnMessage>& messages) {
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) text += "\n";
    text += messages[i].content;
  }
  return text;
}
}  // namespace

std::vector<int64_t> Tokenizer::first_turn_messages(const std::vector<ChatTurnMessage>& messages,
                                                    std::string_view tools_json, const std::string& where) const {
  check_turn_messages(messages, where);
  return first_turn(joined_contents(messages), tools_json);
}

std::vector<int64_t> Tokenizer::next_turn_messages(const std::vector<ChatTurnMessage>& messages, bool action_closed,
                                                   const std::string& where) const {
  check_turn_messages(messages, where);
  const bool all_tools = std::all_of(messages.begin(), messages.end(),
                                     [](const ChatTurnMessage& message) { return message.role == "tool"; });
  return next_turn(joined_contents(messages), all_tools ? Speaker::kTool : Speaker::kUser, action_closed);
}

}  // namespace sao::tokenizer
