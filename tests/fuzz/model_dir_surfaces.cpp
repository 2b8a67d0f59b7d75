// Fuzz surfaces for hostile programs in a model directory (issue 47): chat
// templates that overflow, recurse or grow, and tokenizer.json pipelines
// that grow their text; see sao_fuzz.cpp.
#include "fuzz_harness.hpp"
#include "model/lora.hpp"

namespace sao_fuzz {

// ---- hostile programs in a model directory (issue 47) ----------------------

// Caps the child's address space at what it has mapped already (LibTorch
// maps much) plus `headroom_bytes`, above the renderer's own 1 GiB budget
// for values, so a case that exhausts memory fails as a crash (std::bad_alloc
// is turned into abort) instead of swapping the machine.
void limit_child_memory(uint64_t headroom_bytes) {
  std::ifstream status("/proc/self/status");
  uint64_t mapped_kib = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) mapped_kib = std::strtoull(line.c_str() + 7, nullptr, 10);
  const rlim_t limit = mapped_kib * 1024 + headroom_bytes;
  const rlimit bound{limit, limit};
  ::setrlimit(RLIMIT_AS, &bound);
}

Outcome abort_on_exhaustion(const std::function<Outcome()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::abort();
  }
}

const std::vector<std::string> kTemplateNumbers = {"9223372036854775807",
                                                   "(-9223372036854775807 - 1)",
                                                   "-1",
                                                   "0",
                                                   "1",
                                                   "2",
                                                   "63",
                                                   "64",
                                                   "4294967296",
                                                   "3037000500",
                                                   "100000",
                                                   "10.0",
                                                   "0.0",
                                                   "-0.5",
                                                   "(10.0 ** 300)",
                                                   "'12'",
                                                   "'99999999999999999999'"};

std::string pick(std::mt19937_64& rng, const std::vector<std::string>& options) {
  return options[rng() % options.size()];
}

// One hostile fragment: checked arithmetic, deep nesting, or growth.
std::string hostile_template_fragment(std::mt19937_64& rng) {
  const auto number = [&] { return pick(rng, kTemplateNumbers); };
  const auto count = [&] { return std::to_string(std::vector<int>{1, 10, 150, 250, 1000, 100000}[rng() % 6]); };
  switch (rng() % 14) {
    case 0:
      return "{{ " + number() + " " + pick(rng, {"+", "-", "*", "//", "%", "/", "**"}) + " " + number() + " }}";
    case 1:
      return "{{ -" + number() + " }}{{ " + number() + " | abs }}{{ " + number() + " | int }}{{ " + number() +
             " | float }}";
    case 2:
      return "{{ range(" + number() + ", " + number() + ", " + number() + ") | length }}";
    case 3:
      return "{{ 'abc'[" + number() + ":" + number() + ":" + number() + "] }}{{ [1, 2, 3][" + number() +
             "::" + number() + "] }}";
    case 4:
      return "{{ " + pick(rng, {"'ab'", "[1, 2]"}) + " * " + number() + " }}";
    case 5: {  // deep parentheses, operator chains or filter chains
      const int depth = std::stoi(count());
      std::string text = "{{ " + std::string(static_cast<size_t>(std::min(depth, 1000)), '(') + "1" +
                         std::string(static_cast<size_t>(std::min(depth, 1000)), ')');
      for (int i = 0; i < depth; ++i) text += pick(rng, {" + 1", "|string", "|trim", "|length", ".a", "[0]", "()"});
      return text + " }}";
    }
    case 6: {  // data nested by a loop, then printed, compared or dropped
      return "{% set ns = namespace(x=[]) %}{% for i in range(" + count() +
             ") %}{% set ns.x = " + pick(rng, {"[ns.x]", "{'k': ns.x}", "dict(k=ns.x)", "[ns.x, ns.x]"}) +
             " %}{% endfor %}" +
             pick(rng, {"{{ ns.x | tojson }}", "{{ ns.x }}", "{{ ns.x == ns.x }}", "{{ ns.x == [ns.x] }}", "",
                        "{{ ns.x | tojson(indent=" + number() + ") }}"});
    }
    case 7:  // cycles
      return "{% set l = [] %}{% set ns = namespace() %}{{ l.append(l) }}{% set ns.me = [ns, l] %}" +
             pick(rng, {"{{ l }}", "{{ l | length }}", "{{ ns | tojson }}", "{{ l == l }}", ""});
    case 8:  // string, list and output growth
      return "{% set ns = namespace(s='ab', l=[1]) %}{% for i in range(" + count() + ") %}{% set ns.s = ns.s " +
             pick(rng, {"+ ns.s", "~ ns.s", "* 2", "| replace('a', 'aaa')", "| indent(1000)"}) +
             " %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.s | length }}";
    case 9:
      return "{% for i in range(" + count() + ") %}{% for j in range(" + count() + ") %}{{ 'x' * " + count() +
             " }}{% endfor %}{% endfor %}";
    case 10:
      return "{{ range(" + count() + ") | unique | length }}{{ range(" + count() + ") | join(" +
             pick(rng, {"','", "'x' * 100000"}) + ") | length }}";
    case 11:  // long needles in long strings
      return "{% set ns = namespace(h='a') %}{% for i in range(" + std::to_string(rng() % 25) +
             ") %}{% set ns.h = ns.h ~ ns.h %}{% endfor %}{% set n = ns.h[:" + count() + "] ~ 'b' %}" +
             pick(rng, {"{{ n in ns.h }}", "{{ ns.h.count(n) }}", "{{ ns.h.split(n) | length }}",
                        "{{ ns.h.strip(n) | length }}", "{{ ns.h | replace(n, 'x') | length }}"});
    case 12: {  // copies of a large string kept
      return "{% set ns = namespace(l=[]) %}{% set s = 'x' * " + pick(rng, {"1000", "1000000", "50000000"}) +
             " %}{% for i in range(" + count() + ") %}{{ ns.l.append(s) }}{% endfor %}";
    }
    default:
      return "{{ " + number() + " is odd }}{{ " + number() + " // " + number() + " }}";
  }
}

// Hostile templates generated from the input (arithmetic at the 64-bit
// edges, nesting, growth), each expected to render or be refused by name.
Surface template_limits_surface() {
  Surface surface;
  surface.name = "template_limits";
  surface.seeds = {
      "{{ (-9223372036854775807 - 1) // 2 }} {{ 9223372036854775806 + 1 }} {{ 2 ** 62 }} {{ -7 % 3 }}"
      "{{ range(9223372036854775805, 9223372036854775807, 2) | list }}{{ 'abc'[::-9223372036854775807 - 1] }}",
      "{% set ns = namespace(s='ab', x=[]) %}{% for i in range(10) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.s | length }}{{ ns.x | tojson }}",
      "{{ ' x ' | trim | upper | lower | trim }}{{ [1, [2, [3]]] | tojson(indent=2) }}{{ ('ab' * 3)[1::2] }}"
      "{{ '12' | int * 3 }}{% for m in messages %}{{ m.content * 2 }}{% endfor %}"};
  surface.run = [](const std::string& input, const fs::path&) {
    limit_child_memory(uint64_t{3} << 30);
    return abort_on_exhaustion([&] {
      const nlohmann::ordered_json variables = {
          {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "ok"}}}}};
      // Generated first: a mutated input is mostly refused, which must not
      // keep the generated template from running.
      std::mt19937_64 rng(std::hash<std::string>()(input));
      std::string source;
      for (uint64_t pieces = 1 + rng() % 2; pieces > 0; --pieces) source += hostile_template_fragment(rng);
      try {
        sao::tokenizer::ChatTemplate::parse(source, "generated").render(variables);
      } catch (const sao::Error&) {  // refused by name: the expected end of most
      }
      sao::tokenizer::ChatTemplate::parse(input, "fuzz").render(variables);
      return Outcome::kAccepted;
    });
  };
  return surface;
}

// One hostile tokenizer.json pipeline component, nested up to `depth`,
// with about `budget` components in all (300-step Sequences included).
nlohmann::json hostile_pipeline(std::mt19937_64& rng, const char* kind, int depth, int& budget) {
  const char* list_key = std::string(kind) == "normalizer"      ? "normalizers"
                         : std::string(kind) == "pre_tokenizer" ? "pretokenizers"
                                                                : "decoders";
  const auto text = [&] {
    const std::string unit = pick(rng, {"a", " ", "\xE2\x96\x81", "aa", "\xC3\xA9"});
    std::string out;
    for (uint64_t n = rng() % 9 == 0 ? 100000 : rng() % 6; n > 0; --n) out += unit;
    return out.empty() ? unit : out;
  };
  --budget;
  if (depth > 0 && budget > 0 && rng() % 3 != 0) {
    nlohmann::json steps = nlohmann::json::array();
    for (uint64_t n = rng() % 4 == 0 ? 300 : 1 + rng() % 8; n > 0 && budget > 0; --n)
      steps.push_back(hostile_pipeline(rng, kind, depth - 1, budget));
    return {{"type", "Sequence"}, {list_key, steps}};
  }
  const std::string from = pick(rng, {"a", " ", "\xE2\x96\x81"});
  if (std::string(kind) == "normalizer") {
    switch (rng() % 4) {
      case 0:
        return {{"type", "Prepend"}, {"prepend", text()}};
      case 1:
        return {{"type", pick(rng, {"NFC", "NFD", "NFKC", "NFKD"})}};
      default:
        return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", text()}};
    }
  }
  if (std::string(kind) == "pre_tokenizer") {
    if (rng() % 2 == 0) return {{"type", "ByteLevel"}, {"add_prefix_space", rng() % 2 == 0}, {"use_regex", false}};
    return {{"type", "Metaspace"}, {"replacement", text()}, {"prepend_scheme", "always"}, {"split", rng() % 2 == 0}};
  }
  switch (rng() % 3) {
    case 0:
      return {{"type", "ByteLevel"}};
    case 1:
      return {{"type", "Metaspace"}, {"replacement", from}, {"prepend_scheme", "always"}};
    default:
      return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", text()}};
  }
}

// tokenizer.json pipelines generated from the input: Replace, Prepend,
// Metaspace and ByteLevel steps that grow the text, in nested Sequences.
Surface normalizer_growth_surface() {
  Surface surface;
  surface.name = "normalizer_growth";
  surface.seeds = {sao_test::sentencepiece_json().dump(), sao_test::byte_level_json().dump()};
  surface.run = [](const std::string& input, const fs::path&) {
    limit_child_memory(uint64_t{3} << 30);
    return abort_on_exhaustion([&] {
      const auto encode_and_decode = [](const sao::tokenizer::HfTokenizer& tokenizer) {
        for (const std::string& text :
             std::vector<std::string>{"a", "a b", "\xC3\xA9\xC3\xA9 a", std::string(2000, 'a') + " b"}) {
          const auto ids = tokenizer.encode(text);
          tokenizer.decode(ids);
        }
      };
      std::mt19937_64 rng(std::hash<std::string>()(input));
      for (int k = 0; k < 2; ++k) {
        auto json = rng() % 2 == 0 ? sao_test::sentencepiece_json() : sao_test::byte_level_json();
        for (const char* kind : {"normalizer", "pre_tokenizer", "decoder"})
          if (rng() % 2 == 0) {
            int budget = 400;
            json[kind] = hostile_pipeline(rng, kind, static_cast<int>(rng() % 20), budget);
          }
        try {
          encode_and_decode(sao::tokenizer::HfTokenizer::from_json_text(json.dump(), "", "generated"));
        } catch (const sao::Error&) {
        }
      }
      encode_and_decode(sao::tokenizer::HfTokenizer::from_json_text(input, "", "fuzz"));
      return Outcome::kAccepted;
    });
  };
  return surface;
}

// The policy's text is input too: whatever it writes, the calculator answers
// with a bounded observation or ends the episode, and never throws.

// ---- a downloaded PEFT adapter directory (issue 46) -------------------------

// One case is adapter_config.json, a separator line, then
// adapter_model.safetensors: mutations land in either file. The adapters
// are loaded onto the tiny base and, when accepted, run once.
Surface peft_adapter_surface(const fs::path& scratch) {
  static const std::string separator = "\n--SAFETENSORS--\n";
  Surface surface;
  surface.name = "peft_adapter";
  auto config = tiny();
  config.lora.rank = 2;
  config.lora.targets = {"q_proj", "v_proj", "down_proj"};
  sao::model::CausalLM policy(config);
  const auto seed_dir = scratch / "peft_seed";
  fs::create_directories(seed_dir);
  sao::model::write_peft_adapter(seed_dir.string(), policy, "base");
  const auto read = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  surface.seeds = {read(seed_dir / sao::model::kPeftConfigFile) + separator +
                   read(seed_dir / sao::model::kPeftWeightsFile)};
  surface.run = [](const std::string& input, const fs::path& dir) {
    const auto at = input.find(separator);
    const auto adapter_dir = dir / "adapter";
    fs::create_directories(adapter_dir);
    std::ofstream(adapter_dir / sao::model::kPeftConfigFile, std::ios::binary) << input.substr(0, at);
    std::ofstream(adapter_dir / sao::model::kPeftWeightsFile, std::ios::binary)
        << (at == std::string::npos ? std::string() : input.substr(at + separator.size()));
    sao::model::CausalLM base(tiny());
    sao::model::load_peft_adapter(base, adapter_dir.string());
    torch::NoGradGuard no_grad;
    base->forward(torch::tensor(std::vector<int64_t>{1, 2, 3}).view({1, 3}));
    return Outcome::kAccepted;
  };
  return surface;
}

}  // namespace sao_fuzz
