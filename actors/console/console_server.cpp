// HTTP endpoint of the introspection console; see console_server.hpp.
#include "actors/console/console_server.hpp"

#include "actors/http/http_router.hpp"
#include "actors/protocol.hpp"
#include "base/constant_time.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "config/live_knobs.hpp"
#include "report/prometheus.hpp"
#include "sao/dashboard_html.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

namespace sao::actors {

namespace {
using http::reply_error;
using http::reply_json;

constexpr auto kRequestTimeout = std::chrono::seconds(10);

nlohmann::json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json status_to_json(const msg::ActorStatus& status) {
  nlohmann::json numbers = nlohmann::json::object();
  for (const auto& [key, value] : status.numbers) numbers[key] = number_or_null(value);
  return {{"name", status.name},
          {"kind", status.kind},
          {"state", status.state},
          {"node", status.node},
          {"actor_id", status.actor_id},
          {"mailbox_depth", status.mailbox_depth},
          {"messages_handled", status.messages_handled},
          {"last_error", status.last_error},
          {"activity", status.activity},
          {"numbers", numbers}};
}

}  // namespace

struct ConsoleServer::Impl {
  caf::actor_system& system;
  CoordinatorActor coordinator;
  std::string token = http::random_token();
  std::string host;
  int port = 0;
  http::HttpRouter server;
  std::unique_ptr<net::EventHttpServer> front;
  std::filesystem::path endpoint_file;

  Impl(caf::actor_system& actor_system, CoordinatorActor coordinator_actor)
      : system(actor_system), coordinator(std::move(coordinator_actor)) {}

  // Asks the coordinator and waits for the reply (on this HTTP worker
  // thread only); an error becomes the exception's text.
  template <class Result, class... Ts>
  Result ask(Ts&&... message) {
    caf::scoped_actor self{system};
    Result result{};
    std::string failure;
    self->request(coordinator, kRequestTimeout, std::forward<Ts>(message)...)
        .receive([&](Result& value) { result = std::move(value); },
                 [&](const caf::error& error) { failure = msg::error_text(system, error); });
    if (!failure.empty()) throw Error(failure);
    return result;
  }

  std::vector<msg::ActorStatus> snapshot() { return ask<std::vector<msg::ActorStatus>>(atoms::snapshot_atom_v); }

  nlohmann::json history(int64_t since_step) {
    return report::to_json(ask<report::MetricsHistory>(atoms::history_atom_v, since_step));
  }

  nlohmann::json actors_json() {
    nlohmann::json actors = nlohmann::json::array();
    for (const auto& status : snapshot()) actors.push_back(status_to_json(status));
    return actors;
  }

  nlohmann::json staleness_json() {
    nlohmann::json reply = {{"histogram", nlohmann::json::object()}};
    for (const auto& status : snapshot()) {
      if (status.kind != "replay") continue;
      for (const auto& [key, value] : status.numbers) {
        if (key.rfind("staleness.", 0) == 0) {
          reply["histogram"][key.substr(10)] = value;
        } else if (key == "max_staleness" || key == "dropped_stale" || key == "queued" || key == "received") {
          reply[key] = value;
        }
      }
    }
    return reply;
  }

  nlohmann::json knobs_json() {
    const auto recent = history(std::numeric_limits<int64_t>::max());
    nlohmann::json values = recent["knobs"];
    // The learner's knobs are in its status, under their names.
    for (const auto& status : snapshot()) {
      if (status.kind != "learner") continue;
      for (const auto& spec : config::knob_table()) {
        if (spec.owner != config::KnobOwner::kLearner) continue;
        auto it = status.numbers.find(spec.name);
        if (it != status.numbers.end()) values[spec.name] = number_or_null(it->second);
      }
    }
    nlohmann::json knobs = nlohmann::json::array();
    for (const auto& spec : config::knob_table()) {
      knobs.push_back({{"key", spec.name},
                       {"description", spec.description},
                       {"value", values.value(spec.name, nlohmann::json())}});
    }
    return knobs;
  }

  std::string prometheus_text() {
    report::PrometheusWriter out;
    const auto recent = history(std::numeric_limits<int64_t>::max());
    const auto& latest = recent["latest"];
    if (latest.is_object()) {
      for (const auto& item : latest.items()) {
        if (!item.value().is_number() && !item.value().is_null()) continue;
        out.family("sao_" + item.key(), "gauge", "metrics.jsonl key '" + item.key() + "' at the latest learner step");
        out.sample({}, item.value().is_null() ? std::nan("") : item.value().get<double>());
      }
    }
    if (!recent["evals"].empty()) {
      const auto& eval = recent["evals"].back();
      out.family("sao_heldout_accuracy", "gauge", "held-out accuracy at the latest evaluation");
      out.sample({}, eval["heldout_accuracy"].is_number() ? eval["heldout_accuracy"].get<double>() : std::nan(""));
    }
    const auto statuses = snapshot();
    out.family("sao_actor_up", "gauge", "1 for every actor that answered the introspection request");
    for (const auto& status : statuses) {
      out.sample({{"actor", status.name}, {"kind", status.kind}, {"state", status.state}},
                 status.state == "unresponsive" ? 0.0 : 1.0);
    }
    out.family("sao_actor_mailbox_depth", "gauge", "messages waiting in the actor's mailbox");
    for (const auto& status : statuses) {
      out.sample({{"actor", status.name}, {"kind", status.kind}}, static_cast<double>(status.mailbox_depth));
    }
    out.family("sao_actor_messages_handled_total", "counter", "messages the actor has handled");
    for (const auto& status : statuses) {
      out.sample({{"actor", status.name}, {"kind", status.kind}}, static_cast<double>(status.messages_handled));
    }
    out.family("sao_actor_value", "gauge", "kind-specific numbers each actor reports (key label)");
    for (const auto& status : statuses) {
      for (const auto& [key, value] : status.numbers) {
        out.sample({{"actor", status.name}, {"kind", status.kind}, {"key", key}}, value);
      }
    }
    return out.text();
  }

  // The part of a control request that changes the run; returns what happened.
  std::string control(const nlohmann::json& body, const std::string& origin) {
    if (!body.is_object() || !body.contains("command") || !body["command"].is_string()) {
      throw Error("control: the body must be a JSON object with a string \"command\"");
    }
    const auto command = body["command"].get<std::string>();
    if (command == "pause") return ask<std::string>(atoms::pause_atom_v, origin);
    if (command == "resume") return ask<std::string>(atoms::resume_atom_v, origin);
    if (command == "checkpoint") return ask<std::string>(atoms::checkpoint_atom_v, origin);
    if (command == "stop") return ask<std::string>(atoms::stop_atom_v, origin);
    if (command == "set") {
      if (!body.contains("key") || !body["key"].is_string()) throw Error("control: set needs a string \"key\"");
      if (!body.contains("value")) throw Error("control: set needs a \"value\"");
      const auto& value = body["value"];
      const std::string text = value.is_string() ? value.get<std::string>() : base::dump_json(value);
      return ask<std::string>(atoms::set_atom_v, body["key"].get<std::string>(), text, origin);
    }
    throw Error("control: unknown command '" + command + "' (pause, resume, checkpoint, stop, set)");
  }

  void routes() {
    server.Get("/", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(reinterpret_cast<const char*>(kDashboardHtml), kDashboardHtmlSize,
                           "text/html; charset=utf-8");
    });
    auto guarded = [this](auto produce) {
      return [this, produce](const httplib::Request& request, httplib::Response& response) {
        try {
          produce(request, response);
        } catch (const std::exception& error) {
          reply_error(response, 503, std::string("the run did not answer: ") + error.what());
        }
      };
    };
    server.Get("/api/actors", guarded([this](const httplib::Request&, httplib::Response& response) {
                 reply_json(response, 200, actors_json());
               }));
    server.Get("/api/metrics", guarded([this](const httplib::Request& request, httplib::Response& response) {
                 int64_t since = -1;
                 if (request.has_param("since")) {
                   try {
                     since = std::stoll(request.get_param_value("since"));
                   } catch (const std::exception&) {
                     reply_error(response, 400, "since: expected an integer step");
                     return;
                   }
                 }
                 reply_json(response, 200, history(since));
               }));
    server.Get("/api/staleness", guarded([this](const httplib::Request&, httplib::Response& response) {
                 reply_json(response, 200, staleness_json());
               }));
    server.Get("/api/knobs", guarded([this](const httplib::Request&, httplib::Response& response) {
                 reply_json(response, 200, knobs_json());
               }));
    server.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& response) {
                 response.set_content(prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
               }));
    server.Post("/api/control", [this](const httplib::Request& request, httplib::Response& response) {
      const std::string given = http::presented_token(request);
      if (given.empty()) {
        reply_error(response, 401,
                    "control needs the run's token (Authorization: Bearer TOKEN; see RUN_DIR/console.json)");
        return;
      }
      if (!base::constant_time_equal(given, token)) {
        reply_error(response, 403, "wrong token for this run");
        return;
      }
      nlohmann::json body;
      try {
        body = base::parse_json_limited(request.body, "control: the body");
      } catch (const std::exception& error) {
        reply_error(response, 400, error.what());
        return;
      }
      try {
        reply_json(response, 200, {{"ok", true}, {"result", control(body, "http " + request.remote_addr)}});
      } catch (const std::exception& error) {
        reply_error(response, 400, error.what());
      }
    });
  }
};

ConsoleServer::ConsoleServer(caf::actor_system& system, const CoordinatorActor& coordinator,
                             const config::ConsoleSection& config, const std::string& run_dir,
                             const ConsoleLimits& limits)
    : impl_(std::make_unique<Impl>(system, coordinator)) {
  auto& impl = *impl_;
  impl.host = config.listen;
  impl.server.set_payload_max_length(limits.max_body_bytes);
  impl.routes();
  impl.front = http::listen_or_fall_back(config.listen, config.port, "console", "console.listen", limits, impl.server);
  impl.port = impl.front->port();
  std::filesystem::create_directories(run_dir);
  const nlohmann::json endpoint = {{"url", url()}, {"host", impl.host}, {"port", impl.port}, {"token", impl.token}};
  http::write_owner_only(std::filesystem::path(run_dir) / "console.json", base::dump_json(endpoint, 2) + "\n");
  impl.endpoint_file = std::filesystem::path(run_dir) / "console.json";
  std::fprintf(stderr, "console: %s  token %s  (terminal: sao console --run-dir %s)\n", url().c_str(),
               impl.token.c_str(), run_dir.c_str());
}

ConsoleServer::~ConsoleServer() {
  impl_->front.reset();
  // The file only ever names a live endpoint.
  std::error_code ignored;
  std::filesystem::remove(impl_->endpoint_file, ignored);
}

int ConsoleServer::port() const {
  return impl_->port;
}

std::string ConsoleServer::url() const {
  return "http://" + impl_->host + ":" + std::to_string(impl_->port) + "/";
}

const std::string& ConsoleServer::token() const {
  return impl_->token;
}

net::EventHttpStats ConsoleServer::connection_stats() const {
  return impl_->front->stats();
}

ConsoleEndpoint read_console_endpoint(const std::string& run_dir) {
  const auto document = http::read_endpoint_file(run_dir, "console.json", "console.enabled");
  if (!document.contains("host") || !document["host"].is_string() || !document.contains("port") ||
      !document["port"].is_number_integer() || !document.contains("token") || !document["token"].is_string()) {
    throw Error((std::filesystem::path(run_dir) / "console.json").string() +
                ": expected {\"url\", \"host\", \"port\", \"token\"}");
  }
  ConsoleEndpoint endpoint;
  endpoint.url = document.value("url", std::string());
  endpoint.host = document["host"].get<std::string>();
  endpoint.port = document["port"].get<int>();
  endpoint.token = document["token"].get<std::string>();
  return endpoint;
}

}  // namespace sao::actors
