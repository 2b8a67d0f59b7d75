// The run configuration: one JSON document with a section per subsystem.
// Loading is strict (unknown keys and wrong types are errors that name the
// key and the file), `--set a.b=c` overrides apply before validation, and the
// resolved document is written into the run directory so every run records
// exactly what it ran with.
#pragma once

#include "env/arithmetic.hpp"
#include "model/generation.hpp"
#include "model/model_config.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sao::runtime {

struct RunSection {
  std::string name = "default";
  int64_t seed = 1;
  std::string dir = "runs/default";
};

struct ThreadsSection {
  int64_t torch_intra_op = 2;  // LibTorch (and through it OpenBLAS) threads for maths
};

struct SftSection {
  int64_t steps = 400;
  int64_t batch_size = 64;
  double learning_rate = 2e-3;
  int64_t warmup_steps = 20;
  double weight_decay = 0.01;
  double grad_clip = 1.0;
  int64_t log_every = 25;
};

struct EvalSection {
  double temperature = 0.0;  // greedy held-out accuracy by default
  int64_t max_new_tokens = 8;
  int64_t batch_size = 200;
};

struct RunConfig {
  std::string source;  // where it came from, for error messages
  RunSection run;
  ThreadsSection threads;
  model::ModelConfig model;
  env::ArithmeticConfig task;
  SftSection sft;
  EvalSection eval;
  nlohmann::json document;  // the resolved JSON, as written to the run directory
};

// The config compiled into the binary (config/default.json).
nlohmann::json default_config_document();
// Reads a JSON file; errors name the file and, for parse errors, the byte.
nlohmann::json read_json_file(const std::string& path);
// Applies "a.b.c=value" (value parsed as JSON, else taken as a string).
// Throws sao::Error naming the override when the path is malformed.
void apply_override(nlohmann::json& document, const std::string& assignment);
// Parses and validates every section. `source` names the origin in errors.
RunConfig parse_run_config(const nlohmann::json& document, const std::string& source);
// file empty -> embedded default.
RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides);

}  // namespace sao::runtime
