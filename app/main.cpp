// `sao`: the single binary of the runtime. Dispatches to subcommands and is
// the one place where core errors become messages and exit codes.
#include "app/commands.hpp"
#include "base/allocator.hpp"
#include "base/error.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Command {
  const char* name;
  const char* summary;
  std::function<int(const sao::cli::Args&)> run;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "reinforcement learning with the actor runtime (SAO by default); warm-starts from SFT",
       sao::cli::run_train},
      {"sft", "supervised warm start (from --model weights or from scratch): save it, report held-out accuracy",
       sao::cli::run_sft},
      {"eval", "held-out pass@1 of a checkpoint (also printed as one JSON line)", sao::cli::run_eval},
      {"console", "attach to a running run: live actor table, metrics, pause/resume, set knobs, checkpoint, stop",
       sao::cli::run_console},
      {"plot", "PNG learning curves of one or more runs (reward, accuracy, staleness, DIS rejection)",
       sao::cli::run_plot},
      {"export", "write a checkpoint as a Hugging Face model directory (config, safetensors shards, tokenizer)",
       sao::cli::run_export},
      {"node", "one process of a cluster run: --role learner (listens), rollout or env (join it)", sao::cli::run_node},
      {"doctor", "print the build, the BLAS actually loaded, thread counts, CAF and CUDA/NCCL status",
       sao::cli::run_doctor},
  };
  return table;
}

void print_usage() {
  std::printf("usage: sao <command> [options]\n\ncommands:\n");
  for (const auto& command : commands()) std::printf("  %-8s %s\n", command.name, command.summary);
  std::printf("\n`sao <command> --help` lists a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const sao::cli::Args args(argv + 2, argv + argc);
  for (const auto& command : commands()) {
    if (name != command.name) continue;
    try {
      return command.run(args);
    } catch (const sao::Error& error) {
      std::fprintf(stderr, "sao %s: error: %s\n", name.c_str(), error.what());
      return 1;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "sao %s: internal error: %s\n", name.c_str(), error.what());
      return 3;
    }
  }
  std::fprintf(stderr, "sao: unknown command '%s'\n\n", name.c_str());
  print_usage();
  return 2;
}
