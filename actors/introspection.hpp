// What every actor keeps about itself for the introspection console, and
// the one way a status reply is put together, so the console sees the same
// fields (mailbox depth, messages handled, last error) for every kind.
#pragma once

#include "actors/protocol.hpp"

#include "report/time_accounting.hpp"

#include <chrono>
#include <string>
#include <utility>

namespace sao::actors {

struct ActorCounters {
  int64_t handled = 0;     // messages this actor has handled
  std::string last_error;  // the most recent failure it survived ("" if none)
  // Time in each kind of work (report::kWorkModel, kWorkEnv, kWorkWeights),
  // for busy fractions and the runtime's share of CPU (see time_accounting.hpp).
  std::map<std::string, report::WorkTime> work;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double process_cpu_at_start_s = report::process_cpu_seconds();
};

namespace detail {
// A handler with the signature of `F` that counts the message, then runs `f`.
template <class Self, class F, class R, class... Ts>
auto counted_handler(Self self, F f, R (F::*)(Ts...) const) {
  return [self, f](Ts... xs) -> R {
    ++self->state.counters.handled;
    return f(std::forward<Ts>(xs)...);
  };
}
template <class Self, class F, class R, class... Ts>
auto counted_handler(Self self, F f, R (F::*)(Ts...)) {
  return [self, f](Ts... xs) mutable -> R {
    ++self->state.counters.handled;
    return f(std::forward<Ts>(xs)...);
  };
}
}  // namespace detail

// An actor's behaviour whose every handler counts the message in
// `self->state.counters.handled`: the one place messages are counted.
template <class Behavior, class Self, class... Handlers>
Behavior counted_behavior(Self self, Handlers... handlers) {
  return Behavior{detail::counted_handler(self, std::move(handlers), &Handlers::operator())...};
}

// `self` must be the actor itself (its mailbox is read without locking).
template <class SelfPointer>
msg::ActorStatus describe_actor(SelfPointer self, std::string name, std::string kind, std::string state,
                                const ActorCounters& counters, std::map<std::string, double> numbers) {
  msg::ActorStatus status;
  status.name = std::move(name);
  status.kind = std::move(kind);
  status.state = std::move(state);
  status.numbers = std::move(numbers);
  const double alive_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - counters.started).count();
  status.time = report::time_account_now(alive_s, counters.process_cpu_at_start_s, counters.work);
  for (auto& item : report::time_numbers(status.time)) status.numbers.insert(std::move(item));
  status.mailbox_depth = static_cast<int64_t>(self->mailbox().size());
  status.messages_handled = counters.handled;
  status.last_error = counters.last_error;
  return status;
}

}  // namespace sao::actors
