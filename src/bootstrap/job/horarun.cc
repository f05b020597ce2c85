#include "bootstrap/job/horarun.h"

#include "hora/errors.h"

namespace hora::bootstrap {

Identity HorarunStart::place() const {
  const common::Env& env = this->env();
  Identity id;
  if (!env.isSet("HORA_SIZE")) {
    if (env.isSet("HORA_RANK"))
      throw InvalidArgumentError("HORA_RANK is set but HORA_SIZE is not; start the job with horarun");
    return id;  // a process on its own
  }
  id.size = static_cast<int>(env.getInt("HORA_SIZE", 1, 1 << 20));
  id.rank = static_cast<int>(env.getInt("HORA_RANK", 0, id.size - 1));
  if (env.isSet("HORA_LOCAL_RANK") || env.isSet("HORA_LOCAL_SIZE")) {
    id.local_rank = static_cast<int>(env.getInt("HORA_LOCAL_RANK", 0, id.size - 1));
    id.local_size = static_cast<int>(env.getInt("HORA_LOCAL_SIZE", 1, id.size));
    id.cross_rank = static_cast<int>(env.getInt("HORA_CROSS_RANK", 0, id.size - 1));
    id.cross_size = static_cast<int>(env.getInt("HORA_CROSS_SIZE", 1, id.size));
  } else {
    // A launcher that gave only rank and size: the Communicator derives the rest from the
    // ranks' hostnames (Identity::kDerive).
    id.local_rank = id.local_size = id.cross_rank = id.cross_size = Identity::kDerive;
  }
  return id;
}

RendezvousOptions horarunStore(const common::Env& env, int size) {
  for (const char* name : {"HORA_RENDEZVOUS_ADDR", "HORA_RENDEZVOUS_PORT", "HORA_SECRET"}) {
    if (!env.isSet(name))
      throw InvalidArgumentError(std::string(name) + " is not set although HORA_SIZE=" + std::to_string(size) +
                                 "; start the job with horarun");
  }
  RendezvousOptions r;
  r.address = env.getString("HORA_RENDEZVOUS_ADDR");
  r.port = static_cast<int>(env.getInt("HORA_RENDEZVOUS_PORT", 1, 65535));
  r.secret = env.getString("HORA_SECRET");
  return r;
}

RendezvousOptions HorarunStart::rendezvous() const {
  const int size = place().size;
  return size == 1 ? RendezvousOptions{} : horarunStore(env(), size);
}

RendezvousOptions RunnerStart::rendezvous() const {
  RendezvousOptions r = HorarunStart::rendezvous();
  if (place().size > 1) r.serve_store = env().getBool("HORA_SERVE_STORE");
  return r;
}

}  // namespace hora::bootstrap
