// One function per `sao` subcommand. Each takes the arguments after the
// command name and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace sao::cli {

using Args = std::vector<std::string>;

int run_doctor(const Args& args);
int run_sft(const Args& args);
int run_eval(const Args& args);
int run_train(const Args& args);
int run_console(const Args& args);
int run_plot(const Args& args);
int run_node(const Args& args);
int run_export(const Args& args);

}  // namespace sao::cli
