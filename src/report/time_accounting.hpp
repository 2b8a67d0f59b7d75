// Where a run's time goes: each actor adds the wall and CPU time of its work
// (model maths, environment calls, weight (de)serialisation) to named
// buckets; summarise() turns those samples into busy fractions per actor and,
// per process, the share of CPU time spent outside that work: the actor
// runtime itself (messaging, scheduling), metrics and bookkeeping.
//
// Why CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID): on a machine
// with fewer cores than busy threads, a wall-clock interval also counts time
// the thread spent descheduled, which would inflate the maths share. LibTorch
// runs with one intra-op thread here, so a model call's CPU is its thread's.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace sao::report {

double thread_cpu_seconds();   // CPU time of the calling thread
double process_cpu_seconds();  // user + system CPU time of this process, all threads

// CPU seconds (user + system) of this process's live threads, summed by
// thread name (/proc/self/task/*/comm), with "<name>.threads" the count of
// each. Names as the libraries set them: CAF 0.17 calls its scheduler workers
// "caf.multiplexer" and detached actors "caf.actor"; the main thread is the
// program's name (Linux keeps 15 bytes of a name). Empty where /proc is not mounted.
std::map<std::string, double> thread_cpu_by_name();

struct WorkTime {
  double wall_s = 0.0;
  double cpu_s = 0.0;
  int64_t calls = 0;
};

// Adds the wall and thread-CPU time between construction and destruction to `into`.
class WorkTimer {
 public:
  explicit WorkTimer(WorkTime& into);
  ~WorkTimer();
  WorkTimer(const WorkTimer&) = delete;
  WorkTimer& operator=(const WorkTimer&) = delete;

 private:
  WorkTime& into_;
  std::chrono::steady_clock::time_point wall_start_;
  double cpu_start_;
};

// The work buckets an actor reports; "other" is what is left of the process CPU.
inline constexpr const char* kWorkModel = "model";            // forward/backward, decode, evaluation
inline constexpr const char* kWorkEnv = "env";                // environment reset/step
inline constexpr const char* kWorkWeights = "weights";        // weight (de)serialisation for sync
inline constexpr const char* kWorkCheckpoint = "checkpoint";  // writing checkpoints

// One actor's numbers at one moment.
// One actor's time at one moment: what its status carries (typed) and the
// time accounting sums.
struct TimeAccount {
  double alive_s = 0.0;                 // wall time since the actor started
  double process_cpu_s = 0.0;           // its process's CPU time when sampled
  double process_cpu_at_start_s = 0.0;  // ... and when the actor started
  std::map<std::string, WorkTime> work;
};
// The account now: `alive_s`, this process's CPU time, and the rest as given.
TimeAccount time_account_now(double alive_s, double process_cpu_at_start_s,
                             const std::map<std::string, WorkTime>& work);

struct ActorTimeSample {
  std::string name;
  std::string kind;
  std::string node;  // actors of one process share a node
  TimeAccount time;
};

// The account as status numbers for people (console, Prometheus):
// "alive_s", "process_cpu_s", "process_cpu_at_start_s",
// "work_<bucket>_wall_s", "work_<bucket>_cpu_s", "work_<bucket>_calls",
// "busy_frac" = summed work wall time / alive_s. Programs read the typed
// account.
std::map<std::string, double> time_numbers(const TimeAccount& account);

// {"actors": [{name, kind, node, alive_s, busy_frac, work: {bucket: {wall_s, cpu_s, calls}}}],
//  "nodes": {node: {process_cpu_s, <bucket>_cpu_s..., other_cpu_s, other_cpu_share}}}
// A node's process_cpu_s is the process CPU used while its actors ran: the
// largest value any of them reported (they are sampled moments apart) minus
// the smallest at-start value (so start-up, e.g. loading the warm start, is
// not counted); other_cpu_s = process_cpu_s - the summed work CPU, floored at 0. Throws sao::Error when a sample has
// alive_s <= 0 or negative times.
nlohmann::json summarise_time(const std::vector<ActorTimeSample>& samples);

// One line for the end of a run, from summarise_time's output: learner busy,
// mean rollout busy, and the CPU outside the work over all processes.
std::string describe_time_accounting(const nlohmann::json& accounting);

}  // namespace sao::report
