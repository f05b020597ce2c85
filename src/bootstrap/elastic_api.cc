// hora::elastic (include/hora/elastic.h): a worker's questions to the driver, through the store.
#include <mutex>
#include <sstream>

#include "bootstrap/elastic_join.h"
#include "common/config.h"
#include "common/knobs.h"
#include "hora/elastic.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"

namespace hora::elastic {

bool enabled() { return common::Env::fromProcess().getBool("HORA_ELASTIC"); }

HostUpdates hostUpdates() {
  const auto env = common::Env::fromProcess();
  if (!env.getBool("HORA_ELASTIC")) return {};
  const RendezvousOptions where = common::rendezvousOptionsFrom(env, 2);  // any size > 1: the driver's store
  const auto deadline = common::Deadline::after(common::communicatorOptionsFrom(env).timeout);
  // One connection for the life of the process (a commit asks every few steps).
  static std::mutex mutex;
  static std::unique_ptr<rendezvous::TcpStore> store;
  std::lock_guard lock(mutex);
  std::optional<std::string> value;
  try {
    if (!store) store = std::make_unique<rendezvous::TcpStore>(where.address, where.port, where.secret, deadline);
    value = store->tryGet(bootstrap::kElasticHostsUpdatedKey, deadline);
  } catch (const Error&) {
    store.reset();  // the next call reconnects
    throw;
  }
  if (!value) return {};
  HostUpdates updates;
  std::istringstream in(*value);
  if (!(in >> updates.counter >> updates.kind))
    throw PeerError("cannot read the driver's " + std::string(bootstrap::kElasticHostsUpdatedKey) + " '" + *value + "'");
  return updates;
}

}  // namespace hora::elastic
