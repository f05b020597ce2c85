// hora::elastic (include/hora/elastic.h): a worker's questions to the driver, through the store.
#include <sstream>

#include "bootstrap/job/elastic_join.h"
#include "common/config.h"
#include "common/knobs.h"
#include "hora/elastic.h"
#include "hora/errors.h"

namespace hora::elastic {

bool enabled() { return common::Env::fromProcess().getBool("HORA_ELASTIC"); }

HostUpdates hostUpdates() {
  const auto env = common::Env::fromProcess();
  if (!env.getBool("HORA_ELASTIC")) return {};
  const auto deadline = common::Deadline::after(common::communicatorOptionsFrom(env).timeout);
  // One connection for the life of the process (a commit asks every few steps).
  const std::optional<std::string> value = bootstrap::ProcessState::instance().tryGetFromDriver(
      bootstrap::ElasticStart(env).rendezvous(), bootstrap::kElasticHostsUpdatedKey, deadline);
  if (!value) return {};
  HostUpdates updates;
  std::istringstream in(*value);
  if (!(in >> updates.counter >> updates.kind))
    throw PeerError("cannot read the driver's " + std::string(bootstrap::kElasticHostsUpdatedKey) + " '" + *value + "'");
  return updates;
}

}  // namespace hora::elastic
