// sao's plain turn format, the Tokenizer defaults; see tokenizer.hpp.
#include "tokenizer/tokenizer.hpp"

#include "tokenizer/load_tokenizer.hpp"

namespace sao::tokenizer {

std::vector<int64_t> Tokenizer::first_turn(std::string_view observation) const {
  auto ids = sequence_start(*this);
  const auto text = encode_observation(*this, observation);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

std::vector<int64_t> Tokenizer::next_turn(std::string_view observation, bool /*action_closed*/) const {
  return encode_observation(*this, observation);
}

}  // namespace sao::tokenizer
