// The process's activity board; see activity_board.hpp.
#include "actors/console/activity_board.hpp"

#include <map>
#include <mutex>
#include <vector>

namespace sao::actors {

namespace {

struct ActivityBoard {
  std::mutex mutex;
  std::map<caf::actor_addr, std::vector<Activity>> posted;  // a stack per actor
};

ActivityBoard& activity_board() {
  static ActivityBoard board;
  return board;
}

}  // namespace

std::optional<Activity> current_activity(const caf::actor_addr& actor) {
  auto& board = activity_board();
  std::lock_guard<std::mutex> lock(board.mutex);
  const auto it = board.posted.find(actor);
  if (it == board.posted.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

msg::ActorStatus busy_status(const Activity& activity) {
  msg::ActorStatus status = activity.status;
  status.state = "busy";
  status.activity = activity.what + ", step " + std::to_string(activity.step);
  status.numbers["busy_for_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - activity.since).count();
  return status;
}

ActivityScope::ActivityScope(caf::actor_addr actor, Activity activity) : actor_(std::move(actor)) {
  auto& board = activity_board();
  std::lock_guard<std::mutex> lock(board.mutex);
  board.posted[actor_].push_back(std::move(activity));
}

ActivityScope::~ActivityScope() {
  auto& board = activity_board();
  std::lock_guard<std::mutex> lock(board.mutex);
  auto it = board.posted.find(actor_);
  if (it == board.posted.end()) return;
  it->second.pop_back();
  if (it->second.empty()) board.posted.erase(it);
}

}  // namespace sao::actors
