// A Jinja subset for chat templates; see chat_template.hpp for why and what.
//
// Pipeline: preprocess as Hugging Face does (strip one trailing newline,
// lstrip_blocks, trim_blocks, drop {% generation %} tags), split into text,
// {{ expression }} and {% statement %} pieces with -/- whitespace control,
// parse into a tree, then evaluate over Values (nlohmann JSON data plus
// Jinja's undefined, namespaces, bound methods and builtins).
// The stages live beside this file: lexer, parser, render and filters, over
// the values of value.hpp.
#include "tokenizer/chat_template/chat_template.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/small_file.hpp"
#include "tokenizer/chat_template/render.hpp"

#include <filesystem>

namespace sao::tokenizer {

struct ChatTemplate::Program {
  jinja::Body body;
  std::string where;
};

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& where) {
  if (source.size() > (1u << 20))
    throw Error(where + ": " + std::to_string(source.size()) + " bytes, over the 1 MiB limit for a chat template");
  auto program = std::make_shared<Program>();
  program->where = where;
  program->body = jinja::parse_template(source, where);
  return ChatTemplate(std::move(program));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  jinja::Renderer renderer(program_->where, variables);
  return renderer.render(program_->body);
}

std::optional<ChatTemplate> load_chat_template(const std::string& model_directory) {
  namespace fs = std::filesystem;
  const fs::path dir(model_directory);
  std::error_code error;
  const auto read = [](const fs::path& path) { return base::read_small_file(path); };
  // Present (a FIFO included) means it is read, and refused if not a regular file.
  if (fs::exists(fs::symlink_status(dir / "chat_template.jinja", error)))
    return ChatTemplate::parse(read(dir / "chat_template.jinja"), (dir / "chat_template.jinja").string());
  const auto config_path = dir / "tokenizer_config.json";
  if (!fs::exists(fs::symlink_status(config_path, error))) return std::nullopt;
  const auto config = base::parse_json_limited(read(config_path), config_path.string());
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return std::nullopt;
  const auto& value = config["chat_template"];
  const std::string where = config_path.string() + ": chat_template";
  if (value.is_string()) return ChatTemplate::parse(value.get<std::string>(), where);
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return ChatTemplate::parse(entry["template"].get<std::string>(), where + "[default]");
    }
    throw Error(where + ": a list of named templates without one named \"default\"");
  }
  throw Error(where + ": expected a string or a list of {\"name\", \"template\"}");
}

}  // namespace sao::tokenizer