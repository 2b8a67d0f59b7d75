// The fuzz harness shared by sao_fuzz's sources (see sao_fuzz.cpp): the
// outcome of a case, a surface, the mutations, running a case in a child,
// and the surfaces each source defines.
#pragma once

#include "../test_tiny_tokenizer.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/console/console_server.hpp"
#include "actors/protocol.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/tcp_socket.hpp"
#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "env/remote/external_env.hpp"
#include "env/remote/openenv_env.hpp"
#include "env/tasks/calculator_env.hpp"
#include "env/tasks/countdown_env.hpp"
#include "env/tasks/data_file.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "tokenizer/chat_template/chat_template.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <caf/all.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace sao_fuzz {

enum class Outcome { kClean = 0, kAccepted = 1, kUnclean = 2, kCrash = 3, kHang = 4 };
inline const char* const kOutcomeNames[] = {"clean", "accepted", "unclean", "crash", "hang"};

struct Surface {
  std::string name;
  std::vector<std::string> seeds;
  // Runs one input; returns its outcome (crash/hang are detected outside).
  std::function<Outcome(const std::string& input, const fs::path& scratch)> run;
  std::chrono::seconds deadline{20};
};

struct Counts {
  std::map<Outcome, int64_t> by_outcome;
  int64_t failures() const {
    auto get = [&](Outcome o) { return by_outcome.count(o) ? by_outcome.at(o) : 0; };
    return get(Outcome::kCrash) + get(Outcome::kHang);
  }
};

// sao_fuzz.cpp: a one-layer model the weight surfaces load into
sao::model::ModelConfig tiny();
// sao_fuzz.cpp: mutations and running one case
std::string random_bytes(std::mt19937_64& rng, size_t n);
std::string mutate(std::string text, std::mt19937_64& rng);
// Runs `body` in a child with `deadline`; body returns the outcome (0/1/2).
Outcome run_isolated(const std::function<Outcome()>& body, std::chrono::seconds deadline);
// Silences a child's stderr (the errors are the expected result).
void quiet();
void keep(const fs::path& out, const std::string& surface, int64_t index, const std::string& input);
Counts fuzz_isolated(const Surface& surface, int64_t cases, uint64_t seed, const fs::path& scratch,
                     const fs::path& out);

// model_dir_surfaces.cpp: hostile chat templates and tokenizer.json pipelines
Surface template_limits_surface();
Surface normalizer_growth_surface();
Surface peft_adapter_surface(const fs::path& scratch);

// weights_surfaces.cpp: a peer's weight packet, a bf16 delta's payload
Surface weight_packet_surface();
Surface weight_delta_surface();

// rank_surfaces.cpp: a learner rank's step message and setup from rank 0
Surface rank_step_surface();
Surface rank_setup_surface();

// agent_surfaces.cpp: the agent endpoint's request and reward bodies
Surface agent_request_surface();
Surface agent_reward_surface();

// server_surfaces.cpp: live servers (console, bulk, gatekeeper, TLS port)
Counts fuzz_http(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out);
Counts fuzz_console_trickle(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out);
Counts fuzz_bulk(int64_t cases, uint64_t seed, const fs::path& out);
Counts fuzz_join(int64_t cases, uint64_t seed, const fs::path& out);
Counts fuzz_tls_frames(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out);
Counts fuzz_descriptor_flood(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out);

}  // namespace sao_fuzz
