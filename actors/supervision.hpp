// How many times the coordinator restarts an actor before it ends the run.
// An actor that fails deterministically (a model too large to build, an
// environment whose process exits at once) would otherwise be restarted
// forever, printing "restarting" in a loop while the run makes no progress.
// Failures count "in a row" within a window: an actor that failed long ago
// and has run since starts again from zero.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace sao::actors {

class RestartBudget {
 public:
  using Clock = std::chrono::steady_clock;

  // At most `max_failures` failures of one actor within `window`; the one
  // that reaches the limit is not restarted. max_failures >= 1.
  RestartBudget(int64_t max_failures, std::chrono::milliseconds window)
      : max_failures_(max_failures), window_(window) {}

  // Records a failure of `actor` and says whether it may be restarted.
  bool allow_restart(const std::string& actor, const std::string& error, Clock::time_point now = Clock::now()) {
    auto& record = records_[actor];
    while (!record.failures.empty() && now - record.failures.front() > window_) record.failures.pop_front();
    if (record.failures.empty()) record.first_error = error;  // a new streak
    record.failures.push_back(now);
    return static_cast<int64_t>(record.failures.size()) < max_failures_;
  }

  // The error that started the actor's current streak of failures.
  std::string first_error(const std::string& actor) const {
    const auto it = records_.find(actor);
    return it == records_.end() ? std::string() : it->second.first_error;
  }

  int64_t failures_in_window(const std::string& actor) const {
    const auto it = records_.find(actor);
    return it == records_.end() ? 0 : static_cast<int64_t>(it->second.failures.size());
  }

 private:
  struct Record {
    std::deque<Clock::time_point> failures;
    std::string first_error;
  };
  int64_t max_failures_;
  std::chrono::milliseconds window_;
  std::map<std::string, Record> records_;
};

}  // namespace sao::actors
