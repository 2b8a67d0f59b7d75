// The tokenizer interface the rest of the runtime codes against. Why it is
// abstract: the first tasks use a byte-level vocabulary (no files to ship, every
// string encodable), but a Hugging Face tokenizer.json BPE must be able to slot
// in later without touching the rollout, trainer or environments. Special tokens
// (BOS/EOS/PAD and the chat-role markers) are looked up by name so callers never
// hard-code ids that differ between vocabularies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sao::tokenizer {

// Who speaks an observation in chat terms: the user (a prompt, a game's
// answer) or a tool (the result of a call the policy's action made). An
// environment chooses per step with EnvStep::info "role" ("user" / "tool").
enum class Speaker { kUser, kTool };

// "user" -> kUser, "tool" -> kTool; anything else throws sao::Error naming
// `where` and the value.
Speaker speaker_of(std::string_view role, const std::string& where);

struct ChatTurnMessage;
// Throws sao::Error naming `where` for an empty list or a message whose role
// is not "system", "user" or "tool".
void check_turn_messages(const std::vector<ChatTurnMessage>& messages, const std::string& where);

// One message of a conversation an agent sends over the chat endpoint
// (agent/): its role ("system", "user" or "tool") and its text. The
// policy's own (assistant) messages are never rendered from text: they are
// the ids it sampled.
struct ChatTurnMessage {
  std::string role;
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Plain text to ids. Never emits special tokens: specials are added by the
  // caller (BOS/EOS, role markers) so user text can never forge them.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;

  // Ids to text. Special tokens render as their names (e.g. "<|eos|>") so logs
  // show structure; skip_special drops them, which is what verifiers want.
  // Throws sao::Error for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;
  virtual int64_t pad_id() const = 0;
  // Every id that ends a generated turn: EOS, plus what a model directory's
  // generation_config.json adds (Qwen instruct models stop at <|im_end|> and
  // <|endoftext|>).
  virtual std::vector<int64_t> stop_ids() const { return {eos_id()}; }

  // Turns: how a conversation becomes ids, one turn at a time, so that a
  // trajectory holds exactly the ids the policy saw and produced and
  // nothing is re-tokenized between turns. The defaults are sao's plain
  // format: BOS where the vocabulary has one, then the observation's text;
  // an action ends with EOS; the next observation's text follows it.
  // ChatTokenizer renders a model's chat template instead.
  //
  // Ids of the prompt before the first action (never empty). `tools_json`:
  // "" or a JSON list of the tool schemas the policy may call (an
  // environment's reset info "tools"); a chat template lists them where the
  // model expects them (Qwen's system prompt), and the plain format has no
  // place for them (an environment for plain models describes its tools in
  // the prompt text).
  virtual std::vector<int64_t> first_turn(std::string_view observation, std::string_view tools_json) const;
  // Ids between one action and the next (never empty): the observation,
  // plus whatever the format puts around it (a chat template's user or tool
  // turn, by `speaker`). `action_closed` says the action's last id is
  // action_end()'s (else it stopped on another stop id or was cut at its
  // length limit, and the format closes the turn).
  virtual std::vector<int64_t> next_turn(std::string_view observation, Speaker speaker, bool action_closed) const;
  // The same two, for a turn made of several messages (an agent's system
  // prompt and first question; two tool results after a call): a chat
  // template renders each in its role; the plain format has no roles and
  // joins the contents with "\n" (a tool's message makes the speaker a
  // tool only when every message is a tool's). Throws sao::Error naming
  // `where` for an empty list or a role other than system, user or tool.
  virtual std::vector<int64_t> first_turn_messages(const std::vector<ChatTurnMessage>& messages,
                                                   std::string_view tools_json, const std::string& where) const;
  virtual std::vector<int64_t> next_turn_messages(const std::vector<ChatTurnMessage>& messages, bool action_closed,
                                                  const std::string& where) const;
  // What closes an action in a demonstration (SFT): the id the policy must
  // learn to stop with.
  virtual std::vector<int64_t> action_end() const { return {eos_id()}; }

  // Id of a special token by its full name ("<|user|>"), or nullopt if this
  // vocabulary has no such token.
  virtual std::optional<int64_t> special_id(std::string_view name) const = 0;
  virtual bool is_special(int64_t id) const = 0;
};

}  // namespace sao::tokenizer
