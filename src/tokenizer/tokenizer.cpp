// sao's plain turn format, the Tokenizer defaults; see tokenizer.hpp.
#include "tokenizer/tokenizer.hpp"

#include "base/error.hpp"
#include "tokenizer/load_tokenizer.hpp"

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

}  // namespace sao::tokenizer
