// Time accounting; see time_accounting.hpp.
#include "report/time_accounting.hpp"

#include "base/error.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace sao::report {

namespace {
double seconds_of(const timespec& value) {
  return static_cast<double>(value.tv_sec) + static_cast<double>(value.tv_nsec) * 1e-9;
}
double seconds_of(const timeval& value) {
  return static_cast<double>(value.tv_sec) + static_cast<double>(value.tv_usec) * 1e-6;
}
}  // namespace

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return seconds_of(now);
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return seconds_of(usage.ru_utime) + seconds_of(usage.ru_stime);
}

std::map<std::string, double> thread_cpu_by_name() {
  std::map<std::string, double> result;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code error;
  std::filesystem::directory_iterator task(std::filesystem::path("/proc/self/task"), error);
  // Threads come and go while this reads; one that ended is skipped, and an
  // iteration error ends the list with what was read so far.
  for (; !error && task != std::filesystem::directory_iterator(); task.increment(error)) {
    std::ifstream comm_file(task->path() / "comm");
    std::ifstream stat_file(task->path() / "stat");
    std::string name;
    std::string stat;
    if (!std::getline(comm_file, name) || !std::getline(stat_file, stat)) continue;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 > stat.size()) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::vector<std::string> values;
    for (std::string field; values.size() < 13 && fields >> field;) values.push_back(field);
    if (values.size() < 13) continue;
    result[name] += (std::strtod(values[11].c_str(), nullptr) + std::strtod(values[12].c_str(), nullptr)) / ticks;
    result[name + ".threads"] += 1.0;
  }
  return result;
}

WorkTimer::WorkTimer(WorkTime& into)
    : into_(into), wall_start_(std::chrono::steady_clock::now()), cpu_start_(thread_cpu_seconds()) {}

WorkTimer::~WorkTimer() {
  into_.wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count();
  into_.cpu_s += thread_cpu_seconds() - cpu_start_;
  ++into_.calls;
}

TimeAccount time_account_now(double alive_s, double process_cpu_at_start_s,
                             const std::map<std::string, WorkTime>& work) {
  return {alive_s, process_cpu_seconds(), process_cpu_at_start_s, work};
}

std::map<std::string, double> time_numbers(const TimeAccount& account) {
  std::map<std::string, double> numbers;
  double busy = 0.0;
  for (const auto& [bucket, time] : account.work) {
    numbers["work_" + bucket + "_wall_s"] = time.wall_s;
    numbers["work_" + bucket + "_cpu_s"] = time.cpu_s;
    numbers["work_" + bucket + "_calls"] = static_cast<double>(time.calls);
    busy += time.wall_s;
  }
  numbers["alive_s"] = account.alive_s;
  numbers["process_cpu_s"] = account.process_cpu_s;
  numbers["process_cpu_at_start_s"] = account.process_cpu_at_start_s;
  numbers["busy_frac"] = account.alive_s > 0 ? busy / account.alive_s : 0.0;
  return numbers;
}

nlohmann::json summarise_time(const std::vector<ActorTimeSample>& samples) {
  nlohmann::json actors = nlohmann::json::array();
  struct NodeTotals {
    double process_cpu_s = 0.0;
    double process_cpu_at_start_s = std::numeric_limits<double>::infinity();
    std::map<std::string, double> work_cpu_s;
  };
  std::map<std::string, NodeTotals> nodes;
  for (const auto& sample : samples) {
    if (!(sample.time.alive_s > 0)) {
      throw Error("time accounting: actor '" + sample.name + "' has alive_s " + std::to_string(sample.time.alive_s) +
                  " (must be > 0)");
    }
    nlohmann::json work = nlohmann::json::object();
    double busy = 0.0;
    auto& node = nodes[sample.node];
    node.process_cpu_s = std::max(node.process_cpu_s, sample.time.process_cpu_s);
    node.process_cpu_at_start_s = std::min(node.process_cpu_at_start_s, sample.time.process_cpu_at_start_s);
    for (const auto& [bucket, time] : sample.time.work) {
      if (time.wall_s < 0 || time.cpu_s < 0) {
        throw Error("time accounting: actor '" + sample.name + "' has negative time in bucket '" + bucket + "'");
      }
      work[bucket] = {{"wall_s", time.wall_s}, {"cpu_s", time.cpu_s}, {"calls", time.calls}};
      busy += time.wall_s;
      node.work_cpu_s[bucket] += time.cpu_s;
    }
    actors.push_back({{"name", sample.name},
                      {"kind", sample.kind},
                      {"node", sample.node},
                      {"alive_s", sample.time.alive_s},
                      {"busy_frac", busy / sample.time.alive_s},
                      {"work", work}});
  }
  nlohmann::json node_json = nlohmann::json::object();
  for (const auto& [name, totals] : nodes) {
    const double process_cpu = std::max(0.0, totals.process_cpu_s - totals.process_cpu_at_start_s);
    nlohmann::json entry = {{"process_cpu_s", process_cpu}};
    double work_total = 0.0;
    for (const auto& [bucket, cpu] : totals.work_cpu_s) {
      entry[bucket + "_cpu_s"] = cpu;
      work_total += cpu;
    }
    const double other = std::max(0.0, process_cpu - work_total);
    entry["other_cpu_s"] = other;
    entry["other_cpu_share"] = process_cpu > 0 ? other / process_cpu : 0.0;
    node_json[name] = entry;
  }
  return {{"actors", actors}, {"nodes", node_json}};
}

std::string describe_time_accounting(const nlohmann::json& accounting) {
  double learner_busy = -1.0;
  double rollout_busy = 0.0;
  int rollouts = 0;
  for (const auto& actor : accounting.value("actors", nlohmann::json::array())) {
    const auto kind = actor.value("kind", std::string());
    if (kind == "learner") learner_busy = actor.value("busy_frac", 0.0);
    if (kind == "rollout") {
      rollout_busy += actor.value("busy_frac", 0.0);
      ++rollouts;
    }
  }
  double process_cpu = 0.0;
  double other_cpu = 0.0;
  const auto nodes = accounting.value("nodes", nlohmann::json::object());
  for (const auto& item : nodes.items()) {
    process_cpu += item.value().value("process_cpu_s", 0.0);
    other_cpu += item.value().value("other_cpu_s", 0.0);
  }
  char text[256];
  std::snprintf(text, sizeof(text),
                "time: learner busy %.1f%%, rollout busy %.1f%% (mean of %d), runtime and bookkeeping %.1f%% of "
                "the CPU (time_accounting in summary.json)",
                100.0 * std::max(0.0, learner_busy), rollouts > 0 ? 100.0 * rollout_busy / rollouts : 0.0, rollouts,
                process_cpu > 0 ? 100.0 * other_cpu / process_cpu : 0.0);
  return text;
}

}  // namespace sao::report
