// JSON-lines data files; see data_file.hpp.
#include "env/tasks/data_file.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/utf8.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sao::env {

namespace {
// A line longer than this is not a problem or a demonstration but a broken
// file (or a binary one); reading on would only exhaust memory.
constexpr size_t kMaxLineBytes = size_t{16} << 20;

}  // namespace

std::string required_string(const nlohmann::json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + ": missing \"" + key + "\"");
  if (!it->is_string()) {
    throw Error(where + ": \"" + key + "\" must be a string, got " + std::string(it->type_name()));
  }
  return it->get<std::string>();
}

std::string optional_string(const nlohmann::json& object, const char* key, const std::string& where) {
  return object.contains(key) ? required_string(object, key, where) : std::string();
}

std::vector<DataLine> read_jsonl_file(const std::string& path, const std::string& key) {
  std::error_code ignored;
  const auto absolute = std::filesystem::absolute(path, ignored).lexically_normal().string();
  const std::string file = key + ": " + (absolute.empty() ? path : absolute);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw Error(file + ": cannot read (" + std::strerror(errno) + ")");
  if (!S_ISREG(info.st_mode)) throw Error(file + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(file + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<DataLine> lines;
  std::string text;
  int64_t number = 0;
  while (true) {
    text.clear();
    // getline with a bound: a 10 GB line must not be read into memory first.
    char c = 0;
    bool any = false;
    while (in.get(c)) {
      any = true;
      if (c == '\n') break;
      if (text.size() >= kMaxLineBytes) {
        throw Error(path + ":" + std::to_string(number + 1) + ": line is longer than 16 MiB");
      }
      text += c;
    }
    if (!any) break;
    ++number;
    const std::string where = path + ":" + std::to_string(number);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json value;
    try {
      value = base::parse_json_limited(text, where);
    } catch (const Error& error) {
      throw Error(where + ": not a JSON line (" + error.what() + ")");
    }
    if (!value.is_object()) {
      throw Error(where + ": expected a JSON object per line, got " + std::string(value.type_name()));
    }
    lines.push_back({std::move(value), where});
  }
  if (in.bad()) throw Error(file + ": read failed after line " + std::to_string(number));
  if (lines.empty()) throw Error(file + ": no lines (an empty data file)");
  return lines;
}

std::vector<ChatTurn> chat_turns_of(const nlohmann::json& messages, bool ends_with_reply, const std::string& where) {
  if (!messages.is_array()) throw Error(where + ": \"messages\" must be a list, got " + messages.type_name());
  if (messages.empty()) throw Error(where + ": \"messages\" is empty");
  std::vector<ChatTurn> turns;
  std::string system;
  bool expect_user = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = where + ": messages[" + std::to_string(i) + "]";
    const auto& message = messages[i];
    if (!message.is_object()) throw Error(at + ": must be an object {\"role\", \"content\"}");
    const std::string role = required_string(message, "role", at);
    const std::string content = required_string(message, "content", at);
    if (role == "system") {
      if (i != 0) throw Error(at + ": a system message may only come first");
      system = content;
      continue;
    }
    if (role == "user" || role == "tool") {
      if (!expect_user) throw Error(at + ": two " + role + "/user messages in a row (expected assistant)");
      if (role == "tool" && turns.empty()) throw Error(at + ": a tool message cannot open the conversation");
      turns.push_back({content, role, "", false});
      if (turns.size() == 1 && !system.empty()) turns.front().prompt = system + "\n\n" + content;
      expect_user = false;
      continue;
    }
    if (role == "assistant") {
      if (expect_user) {
        throw Error(at + (turns.empty() ? ": the conversation must start with a user message"
                                        : ": two assistant messages in a row (expected user)"));
      }
      turns.back().reply = content;
      turns.back().has_reply = true;
      expect_user = true;
      continue;
    }
    throw Error(at + ": unknown role " + base::quoted_excerpt(role, 80) + " (system, user, assistant or tool)");
  }
  if (turns.empty()) throw Error(where + ": \"messages\" has no user message");
  if (ends_with_reply && !turns.back().has_reply) {
    throw Error(where + ": \"messages\" must end with an assistant message (the demonstrated response)");
  }
  if (!ends_with_reply && turns.back().has_reply) {
    throw Error(where + ": \"messages\" must end with a user message (the line's \"answer\" answers it)");
  }
  return turns;
}

SftEpisode demonstration_of(const DataLine& line) {
  const auto& value = line.value;
  SftEpisode episode;
  if (value.contains("messages")) {
    if (value.contains("prompt")) throw Error(line.where + ": has both \"messages\" and \"prompt\" (use one)");
    const auto turns = chat_turns_of(value["messages"], /*ends_with_reply=*/true, line.where);
    episode.prompt = turns.front().prompt;
    for (size_t t = 0; t < turns.size(); ++t) {
      SftTurn turn;
      turn.action = turns[t].reply;
      if (t + 1 < turns.size()) {
        turn.observation = turns[t + 1].prompt;
        turn.observation_role = turns[t + 1].role;
      }
      episode.turns.push_back(std::move(turn));
    }
    if (const auto tools = value.find("tools"); tools != value.end()) {
      if (!tools->is_array()) throw Error(line.where + ": \"tools\" must be a list of tool schemas");
      for (const auto& tool : *tools) {
        if (!tool.is_object()) throw Error(line.where + ": every entry of \"tools\" must be an object");
      }
      episode.tools = base::dump_json(*tools);
    }
    return episode;
  }
  if (!value.contains("prompt")) {
    throw Error(line.where + ": needs \"prompt\" with \"response\" (or \"answer\"), or \"messages\"");
  }
  episode.prompt = required_string(value, "prompt", line.where);
  SftTurn turn;
  if (value.contains("response")) {
    turn.action = required_string(value, "response", line.where);
  } else if (value.contains("answer") && (value["answer"].is_string() || value["answer"].is_number())) {
    turn.action = value["answer"].is_string() ? value["answer"].get<std::string>() : base::dump_json(value["answer"]);
  } else if (value.contains("answer") && value["answer"].is_array() && !value["answer"].empty() &&
             (value["answer"][0].is_string() || value["answer"][0].is_number())) {
    const auto& first = value["answer"][0];  // the first of several accepted answers
    turn.action = first.is_string() ? first.get<std::string>() : base::dump_json(first);
  } else {
    throw Error(line.where + ": needs \"response\" (a string), or an \"answer\" that is a string or a number");
  }
  episode.turns.push_back(std::move(turn));
  return episode;
}

std::vector<SftEpisode> read_demonstration_file(const std::string& path, const std::string& key) {
  std::vector<SftEpisode> episodes;
  for (const auto& line : read_jsonl_file(path, key)) episodes.push_back(demonstration_of(line));
  return episodes;
}

}  // namespace sao::env
