// Mutation fuzzing of every surface where input enters sao:
//   config     a run config (JSON text) through the depth-limited parser and the config reader
//   safetensors a weights file through the header reader and the loader
//   env_reply  one reply line of an external environment, through the client
//   openenv_reply  the body of an OpenEnv server's /reset and /step replies, through the HTTP client
//   tokenizer  a tokenizer.json (of a Hugging Face model directory), loaded, then encoding and decoding
//   chat_template  a tokenizer_config.json chat template, parsed, rendered and used for chat turns
//   tool_call  a policy's action to the calculator environment (a tool call, malformed or not, or an answer)
//   countdown  a policy's answer to the countdown environment, through its verifier
//   data_file  a JSON-lines data file: a dataset task's problems (each verifier), played; and demonstrations
//   http       a raw HTTP request to the console server
//   join       a cluster join request (node, role, fingerprint, secret) to the gatekeeper
//   bulk       a raw request to a learner's bulk weight server (net/bulk_transfer.hpp)
//   tls_frames raw bytes (BASP headers, broken ClientHellos) to a learner's TLS port
// Each case is a valid seed input with 1-4 mutations drawn from a seeded
// generator (byte flips, insertions, deletions, duplications, extreme
// numbers, type swaps, deep nesting, invalid UTF-8, truncation), so a run is
// reproducible from --seed and the case number. Cases run in a child process
// with a deadline, and each is classified:
//   clean     refused with a sao::Error (the message names what was wrong)
//   accepted  taken as valid input
//   unclean   refused, but by an exception that is not a sao::Error
//   crash     the child died by a signal
//   hang      the child passed the deadline
// The exit status is 1 when any case crashed or hung. A failing input is
// written to --out DIR as <surface>-<case>.bin.
//
//   sao_fuzz [--surface NAME|all] [--cases N] [--seed S] [--out DIR]
#include "../test_tiny_tokenizer.hpp"
#include "actors/cluster.hpp"
#include "actors/console_server.hpp"
#include "actors/protocol.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "config/run_config.hpp"
#include "env/calculator_env.hpp"
#include "env/countdown_env.hpp"
#include "env/data_file.hpp"
#include "env/environment.hpp"
#include "env/external_env.hpp"
#include "env/openenv_env.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <caf/all.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

enum class Outcome { kClean = 0, kAccepted = 1, kUnclean = 2, kCrash = 3, kHang = 4 };
const char* kOutcomeNames[] = {"clean", "accepted", "unclean", "crash", "hang"};

// ---- mutations ---------------------------------------------------------

const std::vector<std::string> kExtremeNumbers = {"-1",
                                                  "0",
                                                  "4294967297",
                                                  "9223372036854775807",
                                                  "-9223372036854775808",
                                                  "1e308",
                                                  "-1e308",
                                                  "1e-320",
                                                  "NaN",
                                                  "99999999999999999999999",
                                                  "0.5",
                                                  "-0",
                                                  "2147483648",
                                                  "1e6"};
const std::vector<std::string> kValues = {"null", "true", "false", "{}", "[]", "\"\"", "\"x\"", "[1,2]", "{\"a\":1}"};

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string bytes(n, '\0');
  for (auto& c : bytes) c = static_cast<char>(rng() & 0xff);
  return bytes;
}

std::string mutate(std::string text, std::mt19937_64& rng) {
  const int mutations = 1 + static_cast<int>(rng() % 4);
  for (int m = 0; m < mutations; ++m) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (rng() % 11) {
      case 0:  // flip a byte
        if (!text.empty()) text[rng() % text.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // insert random bytes
        text.insert(at, random_bytes(rng, 1 + rng() % 8));
        break;
      case 2:  // delete a range
        if (!text.empty()) text.erase(at, 1 + rng() % 16);
        break;
      case 3: {  // duplicate a range
        if (text.empty()) break;
        const size_t from = rng() % text.size();
        text.insert(at, text.substr(from, 1 + rng() % 64));
        break;
      }
      case 4: {  // replace a number with an extreme one
        const size_t digit = text.find_first_of("0123456789", at);
        if (digit == std::string::npos) break;
        size_t end = digit;
        while (end < text.size() && std::strchr("0123456789.eE+-", text[end]) != nullptr) ++end;
        text.replace(digit, end - digit, kExtremeNumbers[rng() % kExtremeNumbers.size()]);
        break;
      }
      case 5: {  // replace a value after a colon with another type
        const size_t colon = text.find(':', at);
        if (colon == std::string::npos) break;
        const size_t end = text.find_first_of(",}", colon + 1);
        if (end == std::string::npos) break;
        text.replace(colon + 1, end - colon - 1, kValues[rng() % kValues.size()]);
        break;
      }
      case 6: {  // deep nesting
        const size_t depth = 100 + rng() % 100000;
        text.insert(at, std::string(depth, '[') + std::string(rng() % 2 ? depth : 0, ']'));
        break;
      }
      case 7:  // invalid UTF-8 inside the text
        text.insert(at, std::string("\xC3\x28\xE2\x82\xFF\xF0\x9F", 1 + rng() % 7));
        break;
      case 8:  // truncate
        text.resize(at);
        break;
      case 9:  // a long string
        text.insert(at, "\"" + std::string(1 + rng() % 200000, 'a') + "\"");
        break;
      default:  // swap two bytes
        if (text.size() > 1) std::swap(text[rng() % text.size()], text[rng() % text.size()]);
        break;
    }
  }
  return text;
}

// ---- running one case ----------------------------------------------------

// Runs `body` in a child with `deadline`; body returns the outcome (0/1/2).
Outcome run_isolated(const std::function<Outcome()>& body, std::chrono::seconds deadline) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw sao::Error("fork failed");
  if (pid == 0) {
    ::alarm(static_cast<unsigned>(deadline.count()));  // SIGALRM kills a hung child
    Outcome outcome = Outcome::kUnclean;
    try {
      outcome = body();
    } catch (const sao::Error&) {
      outcome = Outcome::kClean;
    } catch (...) {
      outcome = Outcome::kUnclean;
    }
    std::fflush(nullptr);
    ::_exit(static_cast<int>(outcome));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGALRM ? Outcome::kHang : Outcome::kCrash;
  const int code = WEXITSTATUS(status);
  return code <= 2 ? static_cast<Outcome>(code) : Outcome::kCrash;
}

// Silences a child's stderr (the errors are the expected result).
void quiet() {
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) {
    ::dup2(null, 2);
    ::close(null);
  }
}

// ---- surfaces -------------------------------------------------------------

struct Surface {
  std::string name;
  std::vector<std::string> seeds;
  // Runs one input; returns its outcome (crash/hang are detected outside).
  std::function<Outcome(const std::string& input, const fs::path& scratch)> run;
  std::chrono::seconds deadline{20};
};

Surface config_surface() {
  Surface surface;
  surface.name = "config";
  surface.seeds = {sao::base::dump_json(sao::config::default_config_document(), 2)};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto document = sao::base::parse_json_limited(input, "fuzz.json");
    sao::config::parse_run_config(document, "fuzz.json");
    return Outcome::kAccepted;
  };
  return surface;
}

sao::model::ModelConfig tiny() {
  sao::model::ModelConfig config;
  config.hidden_size = 16;
  config.intermediate_size = 32;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.max_position_embeddings = 16;
  return config;
}

Surface safetensors_surface(const fs::path& scratch) {
  Surface surface;
  surface.name = "safetensors";
  const auto path = scratch / "seed.safetensors";
  sao::model::CausalLM policy(tiny());
  sao::model::save_safetensors(path.string(), sao::model::named_tensors_of(*policy), {{"format", "pt"}});
  std::ifstream in(path, std::ios::binary);
  surface.seeds = {std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())};
  surface.run = [](const std::string& input, const fs::path& dir) {
    const auto file = dir / "case.safetensors";
    std::ofstream(file, std::ios::binary) << input;
    sao::model::read_safetensors_header(file.string());
    sao::model::CausalLM model(tiny());
    sao::model::load_into_module(*model, file.string(), /*strict=*/true);
    return Outcome::kAccepted;
  };
  return surface;
}

// A one-connection TCP server on 127.0.0.1 that answers the first request
// line with `reply` and every later one with a valid step reply.
class OneReplyServer {
 public:
  explicit OneReplyServer(std::string reply) : reply_(std::move(reply)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    ::listen(listener_, 1);
    socklen_t length = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneReplyServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    if (thread_.joinable()) thread_.detach();  // the child process exits right after
  }
  int port() const { return port_; }

 private:
  void serve() {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    std::string pending;
    char buffer[4096];
    bool first = true;
    for (;;) {
      const auto n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      pending.append(buffer, static_cast<size_t>(n));
      for (size_t newline; (newline = pending.find('\n')) != std::string::npos;) {
        pending.erase(0, newline + 1);
        const std::string line = first ? reply_ + "\n"
                                       : R"({"id":2,"observation":"o","reward":0,"terminated":true,"truncated":false})"
                                         "\n";
        first = false;
        [[maybe_unused]] auto sent = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
      }
    }
    ::close(fd);
  }
  std::string reply_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// A tokenizer.json comes with a model directory from anywhere: it must be
// refused by name or work, including its regexes (PCRE2's match limit turns
// a catastrophic pattern into an error, not a hang).
Surface tokenizer_surface() {
  Surface surface;
  surface.name = "tokenizer";
  surface.seeds = {sao_test::byte_level_json().dump(), sao_test::sentencepiece_json().dump()};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto tokenizer = sao::tokenizer::HfTokenizer::from_json_text(input, "", "fuzz");
    for (const std::string text : {"hello world", "a <tool> b<|special|>", "\xC3\xA9\xE2\x82 \xFF 123", ""}) {
      const auto ids = tokenizer.encode_with_special_tokens(text);
      tokenizer.decode(ids);
      tokenizer.decode(tokenizer.encode(text), true);
    }
    std::vector<int64_t> every_id;
    for (int64_t id = 0; id < std::min<int64_t>(tokenizer.vocab_size(), 4096); ++id) every_id.push_back(id);
    tokenizer.decode(every_id);
    return Outcome::kAccepted;
  };
  return surface;
}

// A chat template is a program shipped in a model directory: parsing and
// rendering it must end in text or a named error, whatever it holds
// (nesting, loops over range(), huge output are bounded).
Surface chat_template_surface() {
  Surface surface;
  surface.name = "chat_template";
  surface.seeds = {
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}<|special|>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "{%- set ns = namespace(last=-1) %}{%- for m in messages[::-1] %}{%- if m.role == 'user' and ns.last < 0 %}"
      "{%- set ns.last = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}"
      "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\n' + m.content.split('</think>')[-1].lstrip('\n') "
      "+ '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}",
      "{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
      "{{ raise_exception('unknown role') }}{% endif %}{{ m['content'] | tojson(indent=2) }}{% endfor %}"};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto chat_template = sao::tokenizer::ChatTemplate::parse(input, "fuzz");
    const nlohmann::ordered_json variables = {{"messages",
                                               {{{"role", "system"}, {"content", "s"}},
                                                {{"role", "user"}, {"content", " hi <|special|>"}},
                                                {{"role", "assistant"}, {"content", "<think>x</think>\n\nok"}}}},
                                              {"add_generation_prompt", true},
                                              {"bos_token", ""},
                                              {"eos_token", "<|special|>"}};
    chat_template.render(variables);
    const auto tokenizer =
        std::make_shared<const sao::tokenizer::HfTokenizer>(sao::tokenizer::HfTokenizer::from_json_text(
            sao_test::byte_level_json().dump(), R"({"eos_token": "<|special|>"})", "fuzz"));
    const sao::tokenizer::ChatTokenizer chat(tokenizer, chat_template, "fuzz");
    chat.first_turn("hello", "");
    chat.next_turn("again", sao::tokenizer::Speaker::kUser, true);
    chat.next_turn("result", sao::tokenizer::Speaker::kTool, false);
    return Outcome::kAccepted;
  };
  return surface;
}

// The policy's text is input too: whatever it writes, the calculator answers
// with a bounded observation or ends the episode, and never throws.
Surface tool_call_surface() {
  Surface surface;
  surface.name = "tool_call";
  surface.seeds = {sao::env::calculator_call_text("482*37+905"),
                   "Let me see.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": "
                   "\\\"-(12*(3+4))\\\"}\"}\n</tool_call>",
                   "The answer is 18,739."};
  surface.run = [](const std::string& input, const fs::path&) {
    sao::env::CalculatorEnvironment env(sao::env::calculator_config_from_json(nlohmann::json::object(), "fuzz"));
    env.reset(3);
    for (int turn = 0; turn < 3; ++turn) {
      const auto step = env.step(input);
      // A tool's answer is bounded so it cannot fill the policy's context.
      if (step.observation.size() > 120) std::abort();
      if (step.done()) break;
      if (step.info.value("role", std::string()) != "tool") std::abort();
    }
    return Outcome::kAccepted;
  };
  return surface;
}

// Whatever the policy writes, the countdown verifier gives a verdict with a
// reason and ends the episode; it never throws.
Surface countdown_surface() {
  Surface surface;
  surface.name = "countdown";
  surface.seeds = {"3*7+12", " 12 + 7 * 3 ", "(7*3)+12", "12+(3*7)"};
  surface.run = [](const std::string& input, const fs::path&) {
    const sao::env::CountdownProblem problem{{12, 3, 7}, 33};
    const auto verdict = sao::env::verify_countdown(problem, input);
    if (verdict.reason.empty()) std::abort();
    sao::env::CountdownEnvironment env(sao::env::countdown_config_from_json(nlohmann::json::object(), "fuzz"));
    env.reset(3);
    const auto step = env.step(input);
    if (!step.terminated || step.info.value("reason", std::string()).empty()) std::abort();
    return verdict.correct ? Outcome::kAccepted : Outcome::kClean;
  };
  return surface;
}

Surface data_file_surface() {
  Surface surface;
  surface.name = "data_file";
  surface.seeds = {
      "{\"prompt\":\"Add 7 and 12.\",\"answer\":19}\n{\"prompt\":\"Add 1 and 2.\",\"answer\":[3,\"3.0\"]}\n",
      "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Reverse "
      "ab.\"},{\"role\":\"assistant\",\"content\":\"ba\"},{\"role\":\"user\",\"content\":\"Caps.\"}],\"answer\":\"BA\"}"
      "\n"
      "{\"turns\":[{\"prompt\":\"a\",\"answer\":\"b\",\"response\":\"b\"},{\"prompt\":\"c\",\"answer\":\"d\"}]}\n",
      "{\"prompt\":\"Phone?\",\"answer\":\"\\\\d{3}-\\\\d{4}\",\"response\":\"555-1234\"}\n"};
  surface.run = [](const std::string& input, const fs::path& dir) {
    const auto file = (dir / "case.jsonl").string();
    std::ofstream(file, std::ios::binary) << input;
    bool any = false;
    std::string first_error;
    for (const char* verifier : {"exact", "numeric", "last_number", "regex"}) {
      try {
        auto env = sao::env::make_environment(
            "dataset", {{"name", "dataset"}, {"train", file}, {"heldout_fraction", 0}, {"verifier", verifier}}, "fuzz");
        for (uint64_t seed = 0; seed < 3; ++seed) {
          auto step = env->reset(seed);
          for (int turn = 0; turn < 8 && !step.done(); ++turn) step = env->step(turn % 2 == 0 ? "19" : "b\xff");
        }
        env->demonstrations(4, 1);
        any = true;
      } catch (const sao::Error& error) {
        if (first_error.empty()) first_error = error.what();
      }
    }
    try {
      sao::env::read_demonstration_file(file, "fuzz");
      any = true;
    } catch (const sao::Error& error) {
      if (first_error.empty()) first_error = error.what();
    }
    if (!any) throw sao::Error(first_error);
    return Outcome::kAccepted;
  };
  return surface;
}

Surface env_reply_surface() {
  Surface surface;
  surface.name = "env_reply";
  surface.seeds = {
      R"({"id":1,"observation":"What is 2+2?","reward":0,"terminated":false,"truncated":false,"info":{}})",
      R"({"id":1,"observation":"done","reward":1.5,"terminated":true,"truncated":false,"info":{"success":true}})",
      R"({"id":1,"error":"the environment could not reset"})"};
  surface.run = [](const std::string& input, const fs::path&) {
    OneReplyServer server(input);
    sao::env::ExternalConfig config;
    config.channel.address = "127.0.0.1:" + std::to_string(server.port());
    config.channel.timeout_ms = 300;
    config.channel.startup_timeout_ms = 300;
    config.channel.max_restarts = 1;
    sao::env::ExternalEnvironment env(config);
    const auto step = env.reset(1);
    if (!step.done()) env.step("4");
    return Outcome::kAccepted;
  };
  return surface;
}

// Answers GET /health with "healthy" and every other request with `body`
// (HTTP 200), one request per connection as cpp-httplib's client makes them.
class OpenEnvReplyServer {
 public:
  explicit OpenEnvReplyServer(std::string body) : body_(std::move(body)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    ::listen(listener_, 4);
    socklen_t length = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OpenEnvReplyServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    if (thread_.joinable()) thread_.detach();  // the child process exits right after
  }
  int port() const { return port_; }

 private:
  void serve() {
    for (;;) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::string request;
      char buffer[4096];
      size_t header_end = std::string::npos;
      size_t content_length = 0;
      for (;;) {
        if (header_end == std::string::npos && (header_end = request.find("\r\n\r\n")) != std::string::npos) {
          const auto at = request.find("Content-Length: ");
          if (at != std::string::npos && at < header_end) content_length = std::stoul(request.substr(at + 16));
        }
        if (header_end != std::string::npos && request.size() >= header_end + 4 + content_length) break;
        const auto n = ::recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      const bool health = request.rfind("GET /health ", 0) == 0;
      const std::string body = health ? std::string(R"({"status":"healthy"})") : body_;
      const std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] auto sent = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(fd);
    }
  }
  std::string body_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

Surface openenv_reply_surface() {
  Surface surface;
  surface.name = "openenv_reply";
  surface.seeds = {
      R"({"observation":{"text":"17-40?","attempts_left":6,"won":false},"reward":null,"done":false})",
      R"({"observation":{"text":"higher","won":false,"log":[1,"a",{"b":null}]},"reward":false,"done":false})"};
  surface.run = [](const std::string& input, const fs::path&) {
    // The parser alone, as the WebSocket transport uses it, and the 422 reader.
    (void)sao::env::openenv_validation_message(input);
    OpenEnvReplyServer server(input);
    sao::env::OpenEnvConfig config;
    config.urls = {"http://127.0.0.1:" + std::to_string(server.port())};
    config.transport = sao::env::OpenEnvTransport::kHttp;
    config.observation_key = "text";
    config.success_key = "won";
    config.timeout_ms = 300;
    config.startup_timeout_ms = 300;
    sao::env::OpenEnvEnvironment env(config);
    const auto step = env.reset(1);
    if (!step.done()) env.step("4");
    return Outcome::kAccepted;
  };
  return surface;
}

// ---- surfaces against a live server (the server runs in its own child) -----

struct HttpServer {
  pid_t pid = -1;
  int port = 0;
  std::string token;
};

HttpServer start_console(const fs::path& scratch) {
  const auto endpoint = scratch / "run" / "console.json";
  fs::remove_all(scratch / "run");
  std::fflush(nullptr);
  HttpServer server;
  server.pid = ::fork();
  if (server.pid == 0) {
    quiet();
    caf::actor_system_config config;
    sao::actors::register_protocol(config);
    caf::actor_system system{config};
    sao::config::ConsoleSection section;
    section.port = 0;
    // A short read timeout: a truncated request then costs a second, not five.
    sao::actors::ConsoleLimits limits;
    limits.read_timeout_s = 1;
    limits.write_timeout_s = 1;
    limits.keep_alive_timeout_s = 1;
    sao::actors::ConsoleServer console(system, sao::actors::CoordinatorActor{}, section, (scratch / "run").string(),
                                       limits);
    for (;;) ::pause();
  }
  for (int i = 0; i < 6000 && !fs::exists(endpoint); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the file is written whole by then
  std::ifstream in(endpoint);
  const auto json = nlohmann::json::parse(in);
  server.port = json["port"].get<int>();
  server.token = json["token"].get<std::string>();
  return server;
}

// Sends `request` and reads until the server closes or `wait` passes.
// Returns false if the connection could not be made.
// `half_close`: end the request stream after sending (a truncated request
// then fails at once instead of waiting for the server's read timeout).
bool exchange(int port, const std::string& request, std::chrono::seconds wait, std::string* reply,
              bool half_close = true) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return false;
  }
  timeval timeout{static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  if (half_close) ::shutdown(fd, SHUT_WR);
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply->append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return true;
}

// ---- the driver -----------------------------------------------------------

struct Counts {
  std::map<Outcome, int64_t> by_outcome;
  int64_t failures() const {
    auto get = [&](Outcome o) { return by_outcome.count(o) ? by_outcome.at(o) : 0; };
    return get(Outcome::kCrash) + get(Outcome::kHang);
  }
};

void keep(const fs::path& out, const std::string& surface, int64_t index, const std::string& input) {
  if (out.empty()) return;
  fs::create_directories(out);
  std::ofstream(out / (surface + "-" + std::to_string(index) + ".bin"), std::ios::binary) << input;
}

Counts fuzz_isolated(const Surface& surface, int64_t cases, uint64_t seed, const fs::path& scratch,
                     const fs::path& out) {
  Counts counts;
  // The seeds themselves must be taken (or, for a seed that is an error
  // reply, refused cleanly): otherwise every case tests the same early refusal.
  for (const auto& seed_input : surface.seeds) {
    const auto outcome = run_isolated([&] { return surface.run(seed_input, scratch); }, surface.deadline);
    if (outcome != Outcome::kAccepted && outcome != Outcome::kClean) {
      throw sao::Error(surface.name + ": a seed input is " + kOutcomeNames[static_cast<int>(outcome)]);
    }
    if (outcome == Outcome::kClean && surface.name != "env_reply") {
      throw sao::Error(surface.name + ": a seed input is refused; the cases would not reach past it");
    }
  }
  for (int64_t i = 0; i < cases; ++i) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
    const auto input = mutate(surface.seeds[rng() % surface.seeds.size()], rng);
    const auto outcome = run_isolated(
        [&] {
          quiet();
          return surface.run(input, scratch);
        },
        surface.deadline);
    ++counts.by_outcome[outcome];
    if (outcome == Outcome::kCrash || outcome == Outcome::kHang) keep(out, surface.name, i, input);
  }
  return counts;
}

// Cases first..last-1 (mutations of `seeds`, reproducible from `seed` and
// the case number), each sent on its own connection, all at once; returns
// the replies in case order and the inputs through `inputs`.
std::vector<std::string> exchange_batch(int port, const std::vector<std::string>& seeds, uint64_t seed, int64_t first,
                                        int64_t last, std::vector<std::string>* inputs, bool half_close) {
  for (int64_t i = first; i < last; ++i) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
    inputs->push_back(mutate(seeds[rng() % seeds.size()], rng));
  }
  std::vector<std::string> replies(inputs->size());
  std::vector<std::thread> clients;
  for (size_t k = 0; k < inputs->size(); ++k) {
    clients.emplace_back([&, k] { exchange(port, (*inputs)[k], std::chrono::seconds(10), &replies[k], half_close); });
  }
  for (auto& client : clients) client.join();
  return replies;
}

Counts fuzz_http(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  auto server = start_console(scratch);
  const std::string body = R"({"command":"set","key":"min_batch","value":8})";
  const std::vector<std::string> seeds = {
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /api/metrics?since=12 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      "POST /api/control HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + server.token +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      "POST /api/control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}",
      "GET /api/knobs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"};
  for (const auto& request : seeds) {  // each seed is answered: the cases start from requests that work
    std::string reply;
    exchange(server.port, request, std::chrono::seconds(30), &reply, /*half_close=*/false);
    if (reply.rfind("HTTP/1.1 ", 0) != 0) throw sao::Error("http: a seed request got no reply");
  }
  // Cases go in batches of concurrent connections (the server has 64
  // workers); after each batch the server must be alive and answer.
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    const auto replies = exchange_batch(server.port, seeds, seed, first, last, &inputs, /*half_close=*/false);
    int status = 0;
    bool failed = false;
    Outcome failure = Outcome::kCrash;
    if (::waitpid(server.pid, &status, WNOHANG) == server.pid) {
      failed = true;
    } else {
      std::string health;
      if (!exchange(server.port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(30),
                    &health, /*half_close=*/false) ||
          health.rfind("HTTP/1.1 200", 0) != 0) {
        failed = true;
        failure = Outcome::kHang;
      }
    }
    if (failed) {
      ++counts.by_outcome[failure];  // one failure for the batch; every input of it is kept
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "http", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(server.pid, SIGKILL);
      ::waitpid(server.pid, nullptr, 0);
      server = start_console(scratch);
      continue;
    }
    for (const auto& reply : replies)
      ++counts.by_outcome[reply.rfind("HTTP/1.1 2", 0) == 0 ? Outcome::kAccepted : Outcome::kClean];
  }
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  return counts;
}

// The bulk weight server: it runs in a child (a crash is seen as its exit),
// serving one version; each case is a mutated request on its own
// connection, in batches of 16 at once; after each batch a real client
// must still read the version byte for byte.
Counts fuzz_bulk(int64_t cases, uint64_t seed, const fs::path& out) {
  Counts counts;
  constexpr uint64_t kBytes = 1 << 16;
  const std::string secret = "fuzz-secret";
  const auto start_server = [&](int* port) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw sao::Error("pipe failed");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      ::close(pipe_fds[0]);
      sao::net::BulkServer server("127.0.0.1", 0, secret);
      auto bytes = std::make_shared<std::vector<char>>(kBytes, 'w');
      server.publish(1, bytes->data(), bytes->size(), bytes);
      const int bound = server.port();
      if (::write(pipe_fds[1], &bound, sizeof(bound)) != sizeof(bound)) std::_Exit(1);
      for (;;) ::pause();
    }
    ::close(pipe_fds[1]);
    if (::read(pipe_fds[0], port, sizeof(*port)) != sizeof(*port)) throw sao::Error("bulk: the server did not start");
    ::close(pipe_fds[0]);
    return pid;
  };
  const auto request = [&](int64_t version, uint64_t size, const std::string& key) {
    std::string text(sao::net::kBulkMagic, sizeof(sao::net::kBulkMagic));
    text.append(reinterpret_cast<const char*>(&version), sizeof(version));
    text.append(reinterpret_cast<const char*>(&size), sizeof(size));
    const auto length = static_cast<uint32_t>(key.size());
    text.append(reinterpret_cast<const char*>(&length), sizeof(length));
    return text + key;
  };
  // A good request, one for a version not held, and two in one stream.
  const std::vector<std::string> seeds = {request(1, kBytes, secret), request(2, kBytes, secret),
                                          request(2, kBytes, secret) + request(1, kBytes, secret)};
  int port = 0;
  pid_t pid = start_server(&port);
  const auto healthy = [&] {
    try {
      sao::net::BulkClient client("127.0.0.1", static_cast<uint16_t>(port), secret, 30000);
      std::vector<char> into;
      return client.fetch(1, kBytes, into) == sao::net::BulkStatus::kOk && into == std::vector<char>(kBytes, 'w');
    } catch (const sao::Error&) {
      return false;
    }
  };
  if (!healthy()) throw sao::Error("bulk: the seed request failed");
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    const auto replies = exchange_batch(port, seeds, seed, first, last, &inputs, /*half_close=*/true);
    Outcome failure = Outcome::kHang;
    bool failed = false;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) {
      failed = true;
      failure = Outcome::kCrash;
    } else if (!healthy()) {
      failed = true;
    }
    if (failed) {
      ++counts.by_outcome[failure];
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "bulk", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = start_server(&port);
      continue;
    }
    for (const auto& reply : replies) {
      // Status 0 (the bytes follow) is "accepted"; a refusal or a close is clean.
      const bool served = reply.size() >= 12 && reply.compare(0, 8, "SAOBULK1") == 0 && reply[8] == 0 &&
                          reply[9] == 0 && reply[10] == 0 && reply[11] == 0;
      ++counts.by_outcome[served ? Outcome::kAccepted : Outcome::kClean];
    }
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return counts;
}

// The gatekeeper's join: each case mutates the four strings of a valid
// request and sends it in-process; one child serves a batch of cases.
Counts fuzz_join(int64_t cases, uint64_t seed, const fs::path& out) {
  Counts counts;
  const auto fingerprint = sao::actors::message_set_fingerprint();
  const std::vector<std::string> valid = {"node-1", "rollout", fingerprint, "fuzz-secret"};
  const int64_t batch = 50;
  for (int64_t first = 0; first < cases; first += batch) {
    const int64_t last = std::min(cases, first + batch);
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw sao::Error("pipe failed");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      ::close(pipe_fds[0]);
      ::alarm(static_cast<unsigned>(120 + (last - first) * 2));
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      caf::actor_system system{config};
      sao::actors::GatekeeperConfig gatekeeper_config;
      gatekeeper_config.secret = "fuzz-secret";
      gatekeeper_config.fingerprint = fingerprint;
      gatekeeper_config.run_config_json = "{}";
      auto gatekeeper = sao::actors::spawn_gatekeeper(system, gatekeeper_config);
      caf::scoped_actor self{system};
      // Stands in for the coordinator: no node holds any name.
      auto stand_in = system.spawn(
          []() -> caf::behavior { return {[](sao::atoms::join_atom, const std::string&) { return caf::node_id{}; }}; });
      self->send(gatekeeper, sao::atoms::start_atom_v, stand_in, stand_in, stand_in);
      for (int64_t i = first; i < last; ++i) {
        std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
        auto fields = valid;
        const int touched = 1 + static_cast<int>(rng() % 4);
        for (int t = 0; t < touched; ++t) {
          auto& field = fields[rng() % fields.size()];
          field = mutate(field, rng);
        }
        char outcome = static_cast<char>(Outcome::kHang);
        self->request(gatekeeper, std::chrono::seconds(60), sao::atoms::join_atom_v, fields[0], fields[1], fields[2],
                      fields[3])
            .receive([&](const std::string&, int64_t, const caf::actor&, const caf::actor&,
                         const caf::actor&) { outcome = static_cast<char>(Outcome::kAccepted); },
                     [&](const caf::error& error) {
                       outcome =
                           static_cast<char>(error == caf::sec::request_timeout ? Outcome::kHang : Outcome::kClean);
                     });
        [[maybe_unused]] auto written = ::write(pipe_fds[1], &outcome, 1);
      }
      self->send_exit(gatekeeper, caf::exit_reason::user_shutdown);
      self->send_exit(stand_in, caf::exit_reason::user_shutdown);
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    int64_t reported = 0;
    for (char outcome; ::read(pipe_fds[0], &outcome, 1) == 1; ++reported) {
      ++counts.by_outcome[static_cast<Outcome>(outcome)];
    }
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Cases the child never reported: it died (or hung) on the next one.
    if (reported < last - first) {
      const bool hung = WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
      ++counts.by_outcome[hung ? Outcome::kHang : Outcome::kCrash];
      keep(out, "join", first + reported,
           "case " + std::to_string(first + reported) + " of seed " + std::to_string(seed));
    }
  }
  return counts;
}

// Raw bytes to a learner's TLS port, as a stranger without a certificate
// would send them: BASP headers (the one that crashed CAF 0.17.6's parser,
// one claiming a 1 GiB payload), the start of a TLS ClientHello, garbage. The
// server runs in a child; after each batch it must be alive and still
// complete a mutually authenticated handshake.
Counts fuzz_tls_frames(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  const auto certs = scratch / "certs";
  const std::string make_certs =
      std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs '" + certs.string() + "' learner node > /dev/null";
  if (std::system(make_certs.c_str()) != 0) throw sao::Error("tls_frames: deploy/cluster-certs failed");
  sao::actors::ClusterTls server_tls{(certs / "learner").string()};
  sao::actors::ClusterTls client_tls{(certs / "node").string()};
  const auto port_file = scratch / "tls_port";
  auto start_server = [&]() -> pid_t {
    fs::remove(port_file);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      sao::actors::enable_cluster_networking(config, server_tls);
      caf::actor_system system{config};
      sao::actors::GatekeeperConfig gatekeeper_config;
      gatekeeper_config.secret = "fuzz-secret";
      gatekeeper_config.fingerprint = sao::actors::message_set_fingerprint();
      auto gatekeeper = sao::actors::spawn_gatekeeper(system, gatekeeper_config);
      const auto port = sao::actors::publish_gatekeeper(system, gatekeeper, "127.0.0.1", 0, server_tls);
      std::ofstream(port_file.string() + ".tmp") << port;
      fs::rename(port_file.string() + ".tmp", port_file);
      for (;;) ::pause();
    }
    for (int i = 0; i < 6000 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return pid;
  };
  pid_t server = start_server();
  auto port_of = [&] {
    std::ifstream in(port_file);
    int port = 0;
    in >> port;
    return port;
  };
  int port = port_of();
  std::string crash_header(32, '\0');
  crash_header[15] = 1;  // operation 0, payload 0, operation data 1
  std::string big_header(32, '\0');
  big_header[4] = 0x40;  // payload length 1 GiB
  const std::vector<std::string> seeds = {
      crash_header, big_header, std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11), std::string(64, 'x')};
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    for (int64_t i = first; i < last; ++i) {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
      inputs.push_back(mutate(seeds[rng() % seeds.size()], rng));
    }
    std::vector<std::thread> clients;
    for (const auto& input : inputs) {
      clients.emplace_back([&, input] {
        std::string ignored;
        exchange(port, input, std::chrono::seconds(5), &ignored, /*half_close=*/true);
      });
    }
    for (auto& client : clients) client.join();
    int status = 0;
    Outcome failure = Outcome::kClean;
    if (::waitpid(server, &status, WNOHANG) == server) {
      failure = Outcome::kCrash;
    } else if (!sao::actors::tls_handshake_problem("127.0.0.1", static_cast<uint16_t>(port), client_tls).empty()) {
      failure = Outcome::kHang;  // alive, but no longer completes a good handshake
    }
    if (failure != Outcome::kClean) {
      ++counts.by_outcome[failure];
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "tls_frames", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(server, SIGKILL);
      ::waitpid(server, nullptr, 0);
      server = start_server();
      port = port_of();
      continue;
    }
    counts.by_outcome[Outcome::kClean] += last - first;  // dropped by the TLS layer
  }
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  std::string surface_name = "all";
  int64_t cases = 300;
  uint64_t seed = 1;
  fs::path out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sao_fuzz: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--surface") {
      surface_name = value();
    } else if (arg == "--cases") {
      cases = std::stoll(value());
    } else if (arg == "--seed") {
      seed = std::stoull(value());
    } else if (arg == "--out") {
      out = value();
    } else {
      std::fprintf(stderr,
                   "usage: sao_fuzz [--surface "
                   "config|safetensors|env_reply|openenv_reply|tokenizer|chat_template|tool_call|countdown|data_file|"
                   "http|join|bulk|tls_frames|all] "
                   "[--cases N] "
                   "[--seed S] [--out DIR]\n");
      return 2;
    }
  }
  const auto scratch = fs::temp_directory_path() / ("sao_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  const std::vector<std::string> all = {"config",        "safetensors", "env_reply", "openenv_reply", "tokenizer",
                                        "chat_template", "tool_call",   "countdown", "data_file",     "http",
                                        "join",          "bulk",        "tls_frames"};
  int64_t failures = 0;
  bool known = false;
  for (const auto& name : all) {
    if (surface_name != "all" && surface_name != name) continue;
    known = true;
    const auto start = std::chrono::steady_clock::now();
    Counts counts;
    if (name == "config") counts = fuzz_isolated(config_surface(), cases, seed, scratch, out);
    if (name == "safetensors") counts = fuzz_isolated(safetensors_surface(scratch), cases, seed, scratch, out);
    if (name == "env_reply") counts = fuzz_isolated(env_reply_surface(), cases, seed, scratch, out);
    if (name == "openenv_reply") counts = fuzz_isolated(openenv_reply_surface(), cases, seed, scratch, out);
    if (name == "tokenizer") counts = fuzz_isolated(tokenizer_surface(), cases, seed, scratch, out);
    if (name == "chat_template") counts = fuzz_isolated(chat_template_surface(), cases, seed, scratch, out);
    if (name == "data_file") counts = fuzz_isolated(data_file_surface(), cases, seed, scratch, out);
    if (name == "tool_call") counts = fuzz_isolated(tool_call_surface(), cases, seed, scratch, out);
    if (name == "countdown") counts = fuzz_isolated(countdown_surface(), cases, seed, scratch, out);
    if (name == "http") counts = fuzz_http(cases, seed, scratch, out);
    if (name == "join") counts = fuzz_join(cases, seed, out);
    if (name == "bulk") counts = fuzz_bulk(cases, seed, out);
    if (name == "tls_frames") counts = fuzz_tls_frames(cases, seed, scratch, out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-12s %6lld cases:", name.c_str(), static_cast<long long>(cases));
    for (int o = 0; o < 5; ++o) {
      const auto it = counts.by_outcome.find(static_cast<Outcome>(o));
      std::printf("  %s %lld", kOutcomeNames[o],
                  static_cast<long long>(it == counts.by_outcome.end() ? 0 : it->second));
    }
    std::printf("  (%.1f s)\n", seconds);
    std::fflush(stdout);
    failures += counts.failures();
  }
  fs::remove_all(scratch);
  if (!known) {
    std::fprintf(stderr, "sao_fuzz: unknown surface '%s'\n", surface_name.c_str());
    return 2;
  }
  return failures > 0 ? 1 : 0;
}
