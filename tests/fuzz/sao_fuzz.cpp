// Mutation fuzzing of every surface where input enters sao:
//   config     a run config (JSON text) through the depth-limited parser and the config reader
//   safetensors a weights file through the header reader and the loader
//   env_reply  one reply line of an external environment, through the client
//   openenv_reply  the body of an OpenEnv server's /reset and /step replies, through the HTTP client
//   tokenizer  a tokenizer.json (of a Hugging Face model directory), loaded, then encoding and decoding
//   chat_template  a tokenizer_config.json chat template, parsed, rendered and used for chat turns
//   template_limits  hostile chat templates generated per case (64-bit arithmetic, nesting, growth), memory-capped
//   normalizer_growth  hostile tokenizer.json pipelines generated per case (growing steps, nested Sequences)
//   tool_call  a policy's action to the calculator environment (a tool call, malformed or not, or an answer)
//   countdown  a policy's answer to the countdown environment, through its verifier
//   data_file  a JSON-lines data file: a dataset task's problems (each verifier), played; and demonstrations
//   http       a raw HTTP request to the console server
//   join       a cluster join request (node, role, fingerprint, secret) to the gatekeeper
//   bulk       a raw request to a learner's bulk weight server (net/bulk_transfer.hpp)
//   tls_frames raw bytes (BASP headers, broken ClientHellos) to a learner's TLS port
//   weight_packet  a weight version as a peer's CAF bytes, checked, taken and loaded by a rollout's receiver
//   weight_delta   a bf16 delta's change count and payload, applied to a replica's image
//   rank_step      rank 0's step message to a learner rank (trajectories as bytes), decoded and stepped
//   rank_setup     rank 0's setup for a learner rank (model settings, learner config), read and built
//   agent_request  a chat-completions body to the agent endpoint: read, then answered (reply, stream, history check)
//   agent_reward   a reward call's body to the agent endpoint
//   peft_adapter   a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) loaded onto a base
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
//   sao_fuzz [--surface NAME[,NAME...]|all] [--cases N] [--seed S] [--out DIR]
#include "fuzz_harness.hpp"

namespace sao_fuzz {

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
    // SIGALRM kills a hung child. Sanitized builds run several times slower
    // (SAO_FUZZ_DEADLINE_SCALE, set by tests/CMakeLists.txt): a case near the
    // renderer's memory budget took over 20 s under ASan without hanging.
    ::alarm(static_cast<unsigned>(deadline.count() * SAO_FUZZ_DEADLINE_SCALE));
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

// ---- the driver -----------------------------------------------------------

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

}  // namespace sao_fuzz

using namespace sao_fuzz;

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
                   "config|safetensors|env_reply|openenv_reply|tokenizer|chat_template|template_limits|normalizer_"
                   "growth|tool_call|countdown|data_file|http|join|bulk|tls_frames|descriptor_flood|console_trickle|"
                   "weight_packet|"
                   "weight_delta|rank_step|rank_setup|peft_adapter|agent_request|agent_reward|all, "
                   "or a comma list] "
                   "[--cases N] "
                   "[--seed S] [--out DIR]\n");
      return 2;
    }
  }
  const auto scratch = fs::temp_directory_path() / ("sao_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  const std::vector<std::string> all = {"config",
                                        "safetensors",
                                        "env_reply",
                                        "openenv_reply",
                                        "tokenizer",
                                        "chat_template",
                                        "tool_call",
                                        "countdown",
                                        "data_file",
                                        "http",
                                        "join",
                                        "bulk",
                                        "tls_frames",
                                        "template_limits",
                                        "normalizer_growth",
                                        "descriptor_flood",
                                        "console_trickle",
                                        "weight_packet",
                                        "weight_delta",
                                        "rank_step",
                                        "rank_setup",
                                        "peft_adapter",
                                        "agent_request",
                                        "agent_reward"};
  // --surface takes one name, a comma list, or "all".
  std::vector<std::string> wanted;
  for (size_t at = 0; at <= surface_name.size();) {
    const size_t comma = std::min(surface_name.find(',', at), surface_name.size());
    wanted.push_back(surface_name.substr(at, comma - at));
    at = comma + 1;
  }
  for (const auto& name : wanted) {
    if (name != "all" && std::find(all.begin(), all.end(), name) == all.end()) {
      std::fprintf(stderr, "sao_fuzz: unknown surface '%s'\n", name.c_str());
      return 2;
    }
  }
  const auto is_wanted = [&](const std::string& name) {
    return std::find(wanted.begin(), wanted.end(), "all") != wanted.end() ||
           std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  int64_t failures = 0;
  for (const auto& name : all) {
    if (!is_wanted(name)) continue;
    const auto start = std::chrono::steady_clock::now();
    Counts counts;
    if (name == "config") counts = fuzz_isolated(config_surface(), cases, seed, scratch, out);
    if (name == "safetensors") counts = fuzz_isolated(safetensors_surface(scratch), cases, seed, scratch, out);
    if (name == "env_reply") counts = fuzz_isolated(env_reply_surface(), cases, seed, scratch, out);
    if (name == "openenv_reply") counts = fuzz_isolated(openenv_reply_surface(), cases, seed, scratch, out);
    if (name == "tokenizer") counts = fuzz_isolated(tokenizer_surface(), cases, seed, scratch, out);
    if (name == "chat_template") counts = fuzz_isolated(chat_template_surface(), cases, seed, scratch, out);
    if (name == "template_limits") counts = fuzz_isolated(template_limits_surface(), cases, seed, scratch, out);
    if (name == "normalizer_growth") counts = fuzz_isolated(normalizer_growth_surface(), cases, seed, scratch, out);
    if (name == "data_file") counts = fuzz_isolated(data_file_surface(), cases, seed, scratch, out);
    if (name == "tool_call") counts = fuzz_isolated(tool_call_surface(), cases, seed, scratch, out);
    if (name == "countdown") counts = fuzz_isolated(countdown_surface(), cases, seed, scratch, out);
    if (name == "weight_packet") counts = fuzz_isolated(weight_packet_surface(), cases, seed, scratch, out);
    if (name == "weight_delta") counts = fuzz_isolated(weight_delta_surface(), cases, seed, scratch, out);
    if (name == "rank_step") counts = fuzz_isolated(rank_step_surface(), cases, seed, scratch, out);
    if (name == "rank_setup") counts = fuzz_isolated(rank_setup_surface(), cases, seed, scratch, out);
    if (name == "peft_adapter") counts = fuzz_isolated(peft_adapter_surface(scratch), cases, seed, scratch, out);
    if (name == "agent_request") counts = fuzz_isolated(agent_request_surface(), cases, seed, scratch, out);
    if (name == "agent_reward") counts = fuzz_isolated(agent_reward_surface(), cases, seed, scratch, out);
    if (name == "http") counts = fuzz_http(cases, seed, scratch, out);
    if (name == "console_trickle") counts = fuzz_console_trickle(cases, seed, scratch, out);
    if (name == "join") counts = fuzz_join(cases, seed, out);
    if (name == "bulk") counts = fuzz_bulk(cases, seed, out);
    if (name == "tls_frames") counts = fuzz_tls_frames(cases, seed, scratch, out);
    if (name == "descriptor_flood") counts = fuzz_descriptor_flood(cases, seed, scratch, out);
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
  return failures > 0 ? 1 : 0;
}
