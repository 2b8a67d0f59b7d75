// JSON-lines data files a user brings: the dataset task's problems
// (dataset_env.hpp) and demonstrations for the supervised warm start
// (sft.data). Every error names the file and the line.
//
// A demonstration line is one of
//   {"prompt": "...", "response": "..."}                    one turn
//   {"prompt": "...", "answer": "..."}                      a dataset line: the answer is the response
//   {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": "..."}, ...]}
// A transcript alternates: an optional system message first (prefixed to the
// first user message, separated by a blank line), then user (or tool) and
// assistant messages in turn, starting with user and ending with assistant.
// Each assistant message is a trained action; the user or tool message after
// it is the environment's observation, rendered in its role by a chat
// template. "tools" on a transcript line (a JSON list of tool schemas) is what
// the environment's reset shows (SftEpisode::tools). Other keys on a line are
// ignored.
#pragma once

#include "env/environment.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sao::env {

struct DataLine {
  nlohmann::json value;  // a JSON object
  std::string where;     // "path:line"
};

// Every non-blank line of `path` as a JSON object (depth-limited parse).
// Throws sao::Error naming `path:line` for a line that does not parse or is
// not an object, and naming `key` (the config key that named the file, e.g.
// "run.json.task.heldout") and the absolute path when it cannot be read or
// has no lines: a relative path alone does not say where it was looked for.
std::vector<DataLine> read_jsonl_file(const std::string& path, const std::string& key);

// A line's string field; throws sao::Error naming `where` and the key when it
// is missing (required_string) or not a string (both). optional_string gives
// "" for a missing key.
std::string required_string(const nlohmann::json& object, const char* key, const std::string& where);
std::string optional_string(const nlohmann::json& object, const char* key, const std::string& where);

// One chat turn: the prompt (user / tool text) and the assistant's reply.
struct ChatTurn {
  std::string prompt;
  std::string role = "user";  // the prompt's: "user" or "tool" (a tool's result)
  std::string reply;
  bool has_reply = false;
};

// The turns of a "messages" list (rules above). `ends_with_reply`: the list
// must end with an assistant message (demonstrations) or with a user message
// (dataset problems, whose last reply is the line's "answer").
std::vector<ChatTurn> chat_turns_of(const nlohmann::json& messages, bool ends_with_reply, const std::string& where);

// A demonstration line as an episode (rules above). Throws sao::Error naming
// `line.where` and the key.
SftEpisode demonstration_of(const DataLine& line);
std::vector<SftEpisode> read_demonstration_file(const std::string& path, const std::string& key);

}  // namespace sao::env
