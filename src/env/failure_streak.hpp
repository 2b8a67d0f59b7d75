// The circuit breaker for an environment that has died: consecutive failed
// environment calls (reset or step throwing: a timeout, a crash, a server
// that is down), with no successful call between them. At the limit
// (train.max_env_failures_in_a_row) the environment is declared dead and
// whoever holds the streak stops calling it: held-out evaluation
// (train/episode_eval.cpp) stops after that many failures instead of one per
// problem, and an env actor answers every later request with "env dead", so
// the coordinator ends the run after a bounded number of failures, not after
// a timeout per episode. A success resets the count: an environment that
// fails now and then (and is restarted) never trips it.
//
// Header-only: the evaluation (src/train) and the env actor (actors/) share
// it, and neither owns the other.
#pragma once

#include "base/error.hpp"

#include <cstdint>
#include <string>

namespace sao::env {

// Thrown when a FailureStreak trips; what() names the environment, the count,
// the config key and the last failure.
class EnvironmentDead : public Error {
 public:
  using Error::Error;
};

class FailureStreak {
 public:
  // `limit` consecutive failures declare the environment dead; 0: never.
  // `environment` names it in the message ("external env 'guess.py'").
  FailureStreak(int64_t limit, std::string environment) : limit_(limit), environment_(std::move(environment)) {}

  void success() {
    if (!dead()) length_ = 0;
  }
  // Counts one failure; true when it makes the environment dead.
  bool failure(const std::string& error) {
    if (dead()) return false;
    ++length_;
    last_error_ = error;
    return dead();
  }
  bool dead() const { return limit_ > 0 && length_ >= limit_; }
  int64_t length() const { return length_; }
  int64_t limit() const { return limit_; }
  // "environment 'external' is dead: 3 consecutive failures
  // (train.max_env_failures_in_a_row 3); the last: <error>"
  std::string describe() const {
    return "environment '" + environment_ + "' is dead: " + std::to_string(length_) +
           " consecutive failures (train.max_env_failures_in_a_row " + std::to_string(limit_) +
           "); the last: " + last_error_;
  }

 private:
  int64_t limit_ = 0;
  std::string environment_;
  int64_t length_ = 0;
  std::string last_error_;
};

}  // namespace sao::env
