// A one-line progress report for long work (step, named numbers, rate, ETA),
// and a JSONL metrics writer that flushes every line so a crash loses none.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sao::report {

class ProgressLine {
 public:
  ProgressLine(std::string label, int64_t total_steps);
  // Prints "label step/total | name value ... | rate unit/s | ETA".
  void print(int64_t step, const std::vector<std::pair<std::string, double>>& values, double rate,
             const char* rate_unit);
  double elapsed_seconds() const;

 private:
  std::string label_;
  int64_t total_steps_;
  std::chrono::steady_clock::time_point start_;
};

class JsonlWriter {
 public:
  // Appends to `path` (creating parent directories).
  explicit JsonlWriter(const std::string& path);
  void write(const nlohmann::json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

std::string format_duration(double seconds);

}  // namespace sao::report
