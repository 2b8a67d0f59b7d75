// Which run config `sao eval --checkpoint DIR` scores a policy with. The
// config stored with the checkpoint (sao.json "run_config") supplies the task,
// so a model is scored on the split it was kept away from; the user's
// --config file and --set overrides apply over it.
//
// A checkpoint is untrusted input, and its stored config can name an
// external environment: a program to run or an address to connect to. Such
// an environment is never taken from the checkpoint: its stored "task"
// section is dropped, and the user names the environment (--config with env
// and task sections, or --set task=...), unless trust_checkpoint_env
// (--trust-checkpoint-env) says the checkpoint's own may be used.
// Self-contained environments (env::is_self_contained_environment) are
// taken from the checkpoint as before.
#pragma once

#include "config/run_config.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sao::train {

struct EvalConfigSources {
  std::string checkpoint_dir;
  nlohmann::json checkpoint_info = nlohmann::json::object();  // the checkpoint's sao.json
  std::string config_file;                                    // --config; empty: none
  std::vector<std::string> overrides;                         // --set, in order
  bool trust_checkpoint_env = false;                          // --trust-checkpoint-env
};

// Throws sao::Error naming DIR/sao.json and what to pass when the stored
// environment is external and the user named none.
config::RunConfig eval_run_config(const EvalConfigSources& sources);

}  // namespace sao::train
