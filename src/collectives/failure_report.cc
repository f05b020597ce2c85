#include "collectives/failure_report.h"

#include <vector>

#include "bootstrap/job/elastic_join.h"
#include "common/logging.h"
#include "hora/errors.h"

namespace hora::collectives {

std::string reportFailure(rendezvous::Store& store, const FailureReportOptions& o,
                          const std::string& error, bool list_silent_ranks) {
  const auto key = [&](int r) { return bootstrap::failureReportKey(o.key_prefix, r); };
  try {
    const auto deadline = common::Deadline::after(o.grace);
    store.set(key(o.rank), error, deadline);
    std::vector<std::string> others_keys;
    for (int r = 0; r < o.size; ++r)
      if (r != o.rank) others_keys.push_back(key(r));
    try {
      store.wait(others_keys, deadline);  // returns early once every rank has reported
    } catch (const TimeoutError&) {
      // Some ranks stayed silent; they are named below.
    }
    const auto read_deadline = common::Deadline::after(o.grace);
    std::vector<std::string> reports(static_cast<size_t>(o.size));
    for (int r = 0; r < o.size; ++r) {
      if (r == o.rank) continue;
      if (auto v = store.tryGet(key(r), read_deadline))
        reports[static_cast<size_t>(r)] = v->empty() ? "(no detail)" : *v;
    }
    std::string others, silent;
    for (int r = 0; r < o.size; ++r) {
      if (r == o.rank) continue;
      const auto& report = reports[static_cast<size_t>(r)];
      if (!report.empty()) others += "\n  rank " + std::to_string(o.label(r)) + " reported: " + report;
      else silent += (silent.empty() ? "" : ", ") + o.describe_peer(r);
    }
    std::string message = error;
    if (list_silent_ranks && !silent.empty())
      message += "\n  no failure report from " + silent +
                 " within " + std::to_string(o.grace.count()) +
                 " ms: stopped, hung, or far behind?";
    return message + others;
  } catch (const Error& e) {
    HORA_LOG(debug, "could not exchange failure reports: {}", e.what());
    return error;
  }
}

}  // namespace hora::collectives
