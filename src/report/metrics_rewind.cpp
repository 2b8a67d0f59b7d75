// Rewinding metrics.jsonl to a checkpoint; see metrics_rewind.hpp.
#include "report/metrics_rewind.hpp"
#include "report/run_metrics.hpp"

#include "base/atomic_file.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <filesystem>
#include <fstream>

namespace sao::report {
namespace {

// A count a step line holds as a number (the learner writes them as
// doubles); 0 when absent or not a finite non-negative number.
int64_t count_of(const nlohmann::json& line, const char* key) {
  if (!line.contains(key) || !line[key].is_number()) return 0;
  const double value = line[key].get<double>();
  return value >= 0.0 && value < 9.0e15 ? static_cast<int64_t>(value) : 0;
}

}  // namespace

RewoundMetrics rewind_metrics_file(const std::string& metrics_path, int64_t checkpoint_step) {
  RewoundMetrics rewound;
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) return rewound;  // nothing written yet
  std::string kept, moved;
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    nlohmann::json value;
    bool keep = false;
    try {
      value = base::parse_json_limited(line, metrics_path + ":" + std::to_string(line_number));
      keep = value.is_object() && value.contains("step") && value["step"].is_number_integer() &&
             value["step"].get<int64_t>() <= checkpoint_step;
    } catch (const std::exception&) {
      keep = false;  // a line torn by a kill: moved out with the rest
    }
    const bool is_step =
        value.is_object() && value.contains("step") && !value.contains("eval") && !value.contains("event");
    if (is_step) {
      rewound.queued_at_last_step = count_of(value, "queued_after");
      rewound.lost_at_last_step = count_of(value, "episodes_lost");
    }
    if (!keep) {
      if (is_step) rewound.trained_after_checkpoint += count_of(value, "trajectories");
      moved += line + "\n";
      ++rewound.moved_lines;
      continue;
    }
    kept += line + "\n";
    upgrade_legacy_accuracy(value);
    if (value.contains("eval")) {
      rewound.evals.push_back(std::move(value));
    } else if (value.contains("event")) {
      rewound.events.push_back(std::move(value));
    } else {
      rewound.steps.push_back(std::move(value));
    }
  }
  if (in.bad()) throw Error("cannot read metrics file " + metrics_path);
  if (rewound.moved_lines == 0) return rewound;
  std::filesystem::path side(metrics_path);
  side.replace_extension();
  rewound.moved_to = side.string() + ".after-step-" + std::to_string(checkpoint_step) + ".jsonl";
  {
    std::ofstream out(rewound.moved_to, std::ios::app | std::ios::binary);
    out << moved;
    if (!out) throw Error("cannot write " + rewound.moved_to + " (the metrics after the checkpoint)");
  }
  base::write_text_file_atomically(metrics_path, kept);
  return rewound;
}

}  // namespace sao::report
