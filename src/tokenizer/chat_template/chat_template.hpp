// Chat templates: the Jinja programs in tokenizer_config.json's
// `chat_template` that turn a conversation into a model's prompt text.
// Hugging Face renders them with Python's jinja2 (trim_blocks and
// lstrip_blocks on); sao renders the subset real templates use (Qwen3,
// Llama 3, Gemma 3, DeepSeek V3 and the like) and is checked against
// Hugging Face's JavaScript renderer (@huggingface/jinja) in
// tests/test_parity_chat_template.cpp. Debian packages no C++ Jinja engine,
// so this one is written here (docs/decisions.md). A template that uses
// anything outside the subset is refused when parsed, naming the line and
// the construct, never rendered into a silently different prompt.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace sao::tokenizer {

class ChatTemplate {
 public:
  // Throws sao::Error "WHERE: line N: ..." for a syntax error or an
  // unsupported statement, filter, test or function.
  static ChatTemplate parse(const std::string& source, const std::string& where);

  // Renders with `variables` as the template's globals (messages,
  // add_generation_prompt, bos_token, eos_token, tools, ...). Throws
  // sao::Error for a runtime error (raise_exception, a type error),
  // naming the line.
  std::string render(const nlohmann::ordered_json& variables) const;

  struct Program;

 private:
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// The default chat template of a model directory's tokenizer_config.json
// (a string, or the entry named "default" of a list of named templates),
// or chat_template.jinja beside it; nullopt when the model has none (a base
// model). Throws sao::Error when the template does not parse.
std::optional<ChatTemplate> load_chat_template(const std::string& model_directory);

}  // namespace sao::tokenizer
