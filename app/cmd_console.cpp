// `sao console`: the terminal side of the introspection console. It is a
// client of the run's HTTP endpoint (actors/console/console_server.cpp), so it works
// the same against a local run or a learner node elsewhere, and everything
// it can do the dashboard and scripts can do too.
#include "actors/console/console_server.hpp"
#include "app/args.hpp"
#include "app/commands.hpp"
#include "base/error.hpp"
#include "base/host_port.hpp"
#include "base/json_parse.hpp"

#include <httplib.h>
#include <poll.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace sao::cli {

namespace {

struct Connection {
  std::string host;
  int port = 0;
  std::string token;
};

Connection resolve_connection(const ParsedArgs& parsed) {
  Connection connection;
  if (parsed.has("--run-dir")) {
    const auto endpoint = actors::read_console_endpoint(parsed.get("--run-dir"));
    connection = {endpoint.host, endpoint.port, endpoint.token};
  }
  if (parsed.has("--connect")) {
    const auto target = base::parse_host_port(parsed.get("--connect"), "--connect");
    connection.host = target.host;
    connection.port = target.port;
  }
  if (connection.host.empty()) throw Error("give --connect HOST:PORT or --run-dir RUN_DIR");
  if (parsed.has("--token")) connection.token = parsed.get("--token");
  if (connection.token.empty()) {
    if (const char* from_env = std::getenv("SAO_CONSOLE_TOKEN")) connection.token = from_env;
  }
  return connection;
}

class Console {
 public:
  explicit Console(Connection connection)
      : connection_(std::move(connection)), client_(connection_.host, connection_.port) {
    client_.set_connection_timeout(5);
    client_.set_read_timeout(60);  // a checkpoint or a stop waits for the learner
  }

  nlohmann::json get(const std::string& path) {
    auto reply = client_.Get(path.c_str());
    if (!reply) throw Error("cannot reach the run at " + where() + " (" + httplib::to_string(reply.error()) + ")");
    return parse(reply->body, reply->status, path);
  }

  nlohmann::json control(const nlohmann::json& body) {
    if (connection_.token.empty()) {
      throw Error("control commands need the run's token: --token, SAO_CONSOLE_TOKEN, or --run-dir RUN_DIR");
    }
    httplib::Headers headers = {{"Authorization", "Bearer " + connection_.token}};
    auto reply = client_.Post("/api/control", headers, base::dump_json(body), "application/json");
    if (!reply) throw Error("cannot reach the run at " + where() + " (" + httplib::to_string(reply.error()) + ")");
    return parse(reply->body, reply->status, "/api/control");
  }

  std::string where() const { return connection_.host + ":" + std::to_string(connection_.port); }

 private:
  static nlohmann::json parse(const std::string& body, int status, const std::string& path) {
    auto document = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (status != 200) {
      const std::string message =
          document.is_object() && document.contains("error") ? document["error"].get<std::string>() : body;
      throw Error(path + ": " + message + " (HTTP " + std::to_string(status) + ")");
    }
    if (document.is_discarded()) throw Error(path + ": the reply is not JSON");
    return document;
  }

  Connection connection_;
  httplib::Client client_;
};

std::string format_number(const nlohmann::json& value) {
  if (!value.is_number()) return "-";
  const double number = value.get<double>();
  char text[32];
  if (number == std::floor(number) && std::fabs(number) < 1e12) {
    std::snprintf(text, sizeof(text), "%.0f", number);
  } else if (std::fabs(number) < 1e-3 || std::fabs(number) >= 1e5) {
    std::snprintf(text, sizeof(text), "%.3g", number);
  } else {
    std::snprintf(text, sizeof(text), "%.4f", number);
  }
  return text;
}

// The one number per kind worth a column in the table.
std::string headline(const nlohmann::json& actor) {
  const auto& numbers = actor["numbers"];
  auto pick = [&](const char* key, const char* label) {
    return numbers.contains(key) ? std::string(label) + " " + format_number(numbers[key]) + "  " : std::string();
  };
  const auto kind = actor["kind"].get<std::string>();
  if (kind == "rollout") {
    return pick("policy_version", "v") + pick("tokens_per_s", "tok/s") + pick("current_turn", "turn") +
           pick("episodes_done", "done") + pick("busy_frac", "busy");
  }
  if (kind == "learner") {
    return pick("step", "step") + pick("last_step_ms", "ms") + pick("policy_loss", "pg") + pick("busy_frac", "busy");
  }
  if (kind == "replay")
    return pick("queued", "queued") + pick("dropped_stale", "dropped") + pick("max_staleness", "max_st");
  if (kind == "weight_sync") return pick("latest_version", "v") + pick("pushes", "pushes");
  if (kind == "env") return pick("open_episodes", "open") + pick("errors", "errors");
  if (kind == "coordinator") return pick("steps", "steps") + pick("episodes_lost", "lost");
  return "";
}

void print_actor_table(const nlohmann::json& actors) {
  std::printf("%-14s %-12s %-17s %7s %9s  %s\n", "ACTOR", "KIND", "STATE", "MAILBOX", "HANDLED", "NUMBERS");
  for (const auto& actor : actors) {
    std::printf("%-14s %-12s %-17s %7lld %9lld  %s\n", actor["name"].get<std::string>().c_str(),
                actor["kind"].get<std::string>().c_str(), actor["state"].get<std::string>().c_str(),
                actor["mailbox_depth"].get<long long>(), actor["messages_handled"].get<long long>(),
                headline(actor).c_str());
    const auto activity = actor.value("activity", std::string());
    if (!activity.empty()) std::printf("%-14s   busy: %s\n", "", activity.c_str());
    const auto error = actor["last_error"].get<std::string>();
    if (!error.empty()) std::printf("%-14s   last error: %s\n", "", error.c_str());
  }
}

void print_inspect(const nlohmann::json& actors, const std::string& name) {
  for (const auto& actor : actors) {
    if (actor["name"] != name) continue;
    std::printf("%s (%s) on node %s, actor id %llu\n", name.c_str(), actor["kind"].get<std::string>().c_str(),
                actor["node"].get<std::string>().c_str(), actor["actor_id"].get<unsigned long long>());
    std::printf("  state            %s\n", actor["state"].get<std::string>().c_str());
    if (!actor.value("activity", std::string()).empty())
      std::printf("  activity         %s\n", actor["activity"].get<std::string>().c_str());
    std::printf("  mailbox depth    %lld\n", actor["mailbox_depth"].get<long long>());
    std::printf("  messages handled %lld\n", actor["messages_handled"].get<long long>());
    std::printf("  last error       %s\n", actor["last_error"].get<std::string>().c_str());
    for (const auto& item : actor["numbers"].items()) {
      std::printf("  %-16s %s\n", item.key().c_str(), format_number(item.value()).c_str());
    }
    return;
  }
  std::string names;
  for (const auto& actor : actors) names += " " + actor["name"].get<std::string>();
  throw Error("inspect " + name + ": no such actor (actors:" + names + ")");
}

void print_metrics(const nlohmann::json& history) {
  if (history["latest"].is_null()) {
    std::printf("no learner step yet\n");
  } else {
    std::printf("latest step:\n");
    for (const auto& item : history["latest"].items()) {
      std::printf("  %-26s %s\n", item.key().c_str(), format_number(item.value()).c_str());
    }
  }
  for (const auto& eval : history["evals"]) {
    std::printf("eval step %-6s held-out accuracy %s\n", format_number(eval["step"]).c_str(),
                format_number(eval["heldout_accuracy"]).c_str());
  }
}

void print_staleness(const nlohmann::json& staleness) {
  std::printf("max_staleness %s  dropped_stale %s  queued %s  received %s\n",
              format_number(staleness.value("max_staleness", nlohmann::json())).c_str(),
              format_number(staleness.value("dropped_stale", nlohmann::json())).c_str(),
              format_number(staleness.value("queued", nlohmann::json())).c_str(),
              format_number(staleness.value("received", nlohmann::json())).c_str());
  double total = 0;
  for (const auto& item : staleness["histogram"].items()) total += item.value().get<double>();
  std::printf("staleness at hand-out (policy versions behind):\n");
  for (const auto& item : staleness["histogram"].items()) {
    const double count = item.value().get<double>();
    const int bar = total > 0 ? static_cast<int>(40.0 * count / total + 0.5) : 0;
    std::printf("  %3s %8.0f %s\n", item.key().c_str(), count, std::string(static_cast<size_t>(bar), '#').c_str());
  }
}

const char* kHelp =
    "commands:\n"
    "  top                 refreshing actor table (Enter returns to the prompt)\n"
    "  actors              the actor table once\n"
    "  inspect ACTOR       everything one actor reports\n"
    "  metrics             the latest step's metrics and the evaluations\n"
    "  staleness           replay's staleness histogram and limits\n"
    "  knobs               the knobs `set` can change, with their values\n"
    "  pause [rollouts]    stop starting new episodes (in-flight ones finish)\n"
    "  resume              start generating again\n"
    "  set KEY VALUE       change a live knob (max_staleness, min_batch, max_batch, actor_lr, critic_lr)\n"
    "  checkpoint          write a checkpoint now\n"
    "  stop                final evaluation and checkpoint, then the run ends\n"
    "  help, quit\n";

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

bool enter_pressed(int timeout_ms) {
  pollfd input{STDIN_FILENO, POLLIN, 0};
  if (::poll(&input, 1, timeout_ms) <= 0) return false;
  std::string ignored;
  std::getline(std::cin, ignored);
  return true;
}

void run_top(Console& console, int interval_ms, int64_t refreshes) {
  for (int64_t shown = 0; refreshes <= 0 || shown < refreshes; ++shown) {
    const auto actors = console.get("/api/actors");
    const auto history = console.get("/api/metrics?since=" + std::to_string(std::numeric_limits<int64_t>::max()));
    if (isatty(STDOUT_FILENO)) std::printf("\033[H\033[2J");
    const auto& latest = history["latest"];
    std::printf("sao run at %s  step %s  reward %s  tokens/s %s  rollouts %s\n\n", console.where().c_str(),
                latest.is_null() ? "-" : format_number(latest["step"]).c_str(),
                latest.is_null() ? "-" : format_number(latest["reward_mean"]).c_str(),
                latest.is_null() ? "-" : format_number(latest["tokens_per_s"]).c_str(),
                history["knobs"].value("rollouts_paused", 0.0) > 0 ? "paused" : "running");
    print_actor_table(actors);
    std::fflush(stdout);
    if (refreshes > 0 && shown + 1 == refreshes) break;
    if (enter_pressed(interval_ms)) break;
  }
}

// Runs one console command; returns false for `quit`.
bool run_command(Console& console, const std::vector<std::string>& words, int interval_ms) {
  if (words.empty()) return true;
  const auto& verb = words[0];
  auto need = [&](size_t count, const char* usage) {
    if (words.size() != count) throw Error(std::string("usage: ") + usage);
  };
  if (verb == "quit" || verb == "exit") return false;
  if (verb == "help") {
    std::printf("%s", kHelp);
  } else if (verb == "top") {
    run_top(console, interval_ms, 0);
  } else if (verb == "actors") {
    print_actor_table(console.get("/api/actors"));
  } else if (verb == "inspect") {
    need(2, "inspect ACTOR");
    print_inspect(console.get("/api/actors"), words[1]);
  } else if (verb == "metrics") {
    print_metrics(console.get("/api/metrics?since=" + std::to_string(std::numeric_limits<int64_t>::max())));
  } else if (verb == "staleness") {
    print_staleness(console.get("/api/staleness"));
  } else if (verb == "knobs") {
    for (const auto& knob : console.get("/api/knobs")) {
      std::printf("  %-14s %-12s %s\n", knob["key"].get<std::string>().c_str(), format_number(knob["value"]).c_str(),
                  knob["description"].get<std::string>().c_str());
    }
  } else if (verb == "pause" || verb == "resume") {
    if (words.size() > 2 || (words.size() == 2 && words[1] != "rollouts")) {
      throw Error("usage: " + verb + " [rollouts]");
    }
    std::printf("%s\n", console.control({{"command", verb}})["result"].get<std::string>().c_str());
  } else if (verb == "set") {
    need(3, "set KEY VALUE");
    std::printf("%s\n", console.control({{"command", "set"}, {"key", words[1]}, {"value", words[2]}})["result"]
                            .get<std::string>()
                            .c_str());
  } else if (verb == "checkpoint" || verb == "stop") {
    need(1, verb == "stop" ? "stop" : "checkpoint");
    std::printf("%s\n", console.control({{"command", verb}})["result"].get<std::string>().c_str());
  } else {
    throw Error("unknown command '" + verb + "' (type help)");
  }
  return true;
}

}  // namespace

int run_console(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"--connect", true, false, "HOST:PORT of a run's console endpoint (printed at start)"},
      {"--run-dir", true, false, "a local run's directory: endpoint and token from RUN_DIR/console.json"},
      {"--token", true, false, "control token (else SAO_CONSOLE_TOKEN, else from --run-dir)"},
      {"--command", true, true, "run this console command and exit (repeatable; e.g. --command \"set min_batch 4\")"},
      {"--interval-ms", true, false, "refresh period of `top` (default 1000)"},
      {"--help", false, false, "show this help"},
  };
  const auto parsed = parse_args("console", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao console (--connect HOST:PORT | --run-dir RUN_DIR) [options]\n%s\n%s",
                flags_help(specs).c_str(), kHelp);
    return 0;
  }
  Console console(resolve_connection(parsed));
  const int64_t interval = parsed.get_int("--interval-ms", 1000);
  if (interval < 50 || interval > 3600000)
    throw Error("--interval-ms must be in [50, 3600000], got " + std::to_string(interval));
  const int interval_ms = static_cast<int>(interval);
  if (interval_ms < 50) throw Error("--interval-ms: must be >= 50");
  if (parsed.has("--command")) {
    for (const auto& command : parsed.all("--command")) {
      const auto words = split_words(command);
      // `top` without a terminal shows one refresh, so scripts can capture it.
      if (!words.empty() && words[0] == "top" && !isatty(STDIN_FILENO)) {
        run_top(console, interval_ms, 1);
        continue;
      }
      run_command(console, words, interval_ms);
    }
    return 0;
  }
  std::printf("connected to %s; type help for commands\n", console.where().c_str());
  for (std::string line;;) {
    std::printf("sao> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    try {
      if (!run_command(console, split_words(line), interval_ms)) break;
    } catch (const Error& error) {
      std::printf("error: %s\n", error.what());
    }
  }
  return 0;
}

}  // namespace sao::cli
