// A Hugging Face tokenizer whose turns follow the model's chat template:
// each observation is a user turn, each action an assistant turn. Why the
// turns are built piecewise rather than by rendering the whole conversation
// and tokenizing it again: the policy's own ids (its sampled action and the
// end-of-turn token it chose) stay exactly as generated, which is what
// token-in, token-out means, and an environment's text is encoded as plain
// text, so an observation that contains "<|im_start|>" cannot forge a turn.
//
// The template is rendered around placeholders: the first turn is
// render([user: OBS], add_generation_prompt, tools); the ids between two
// actions come from render([user: U, assistant: ACTION, user|tool: OBS],
// add_generation_prompt) after ACTION, less the end-of-turn token when the
// policy already generated it. A tool call is the policy's own text (Qwen's
// "<tool_call>{...}</tool_call>"), so it is kept as generated, exactly what
// the template writes for an assistant message carrying that call. The end-of-turn token is the special token
// the template writes right after an assistant's content (<|im_end|>,
// <|eot_id|>, <end_of_turn>); it becomes a stop id and closes every
// demonstrated action.
#pragma once

#include "tokenizer/chat_template/chat_template.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sao::tokenizer {

class ChatTokenizer final : public Tokenizer {
 public:
  // Throws sao::Error when the template cannot render a plain user /
  // assistant conversation (e.g. it raises on it).
  ChatTokenizer(std::shared_ptr<const HfTokenizer> tokenizer, ChatTemplate chat_template, std::string where);

  std::vector<int64_t> encode(std::string_view text) const override { return tokenizer_->encode(text); }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const override {
    return tokenizer_->decode(ids, skip_special);
  }
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  int64_t bos_id() const override { return tokenizer_->bos_id(); }
  int64_t eos_id() const override { return tokenizer_->eos_id(); }
  int64_t pad_id() const override { return tokenizer_->pad_id(); }
  std::optional<int64_t> special_id(std::string_view name) const override { return tokenizer_->special_id(name); }
  bool is_special(int64_t id) const override { return tokenizer_->is_special(id); }
  // The tokenizer's stop ids and the template's end-of-turn token.
  std::vector<int64_t> stop_ids() const override { return stop_ids_; }

  // Throws sao::Error when `tools_json` is not a JSON list of objects, or
  // when the template ignores tools (the policy would never see them).
  std::vector<int64_t> first_turn(std::string_view observation, std::string_view tools_json) const override;
  // A tool turn the template cannot render (it raises) throws sao::Error with the template's message.
  std::vector<int64_t> next_turn(std::string_view observation, Speaker speaker, bool action_closed) const override;
  std::vector<int64_t> first_turn_messages(const std::vector<ChatTurnMessage>& messages, std::string_view tools_json,
                                           const std::string& where) const override;
  std::vector<int64_t> next_turn_messages(const std::vector<ChatTurnMessage>& messages, bool action_closed,
                                          const std::string& where) const override;
  std::vector<int64_t> action_end() const override { return {end_of_turn_}; }

  int64_t end_of_turn_id() const { return end_of_turn_; }

 private:
  // `text` with every occurrence of a message's placeholder replaced by its
  // content, encoded as one text (HfTokenizer::encode_template): special
  // tokens are matched in the template's text only, never in a message.
  std::vector<int64_t> encode_around(const std::string& text, const std::vector<ChatTurnMessage>& messages) const;
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json* tools = nullptr) const;

  std::shared_ptr<const HfTokenizer> tokenizer_;
  ChatTemplate template_;
  std::string where_;
  int64_t end_of_turn_ = -1;
  std::string end_of_turn_text_;
  std::vector<int64_t> stop_ids_;
};

}  // namespace sao::tokenizer
