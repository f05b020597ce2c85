#include "bootstrap/job/foreign.h"

#include <functional>

#include "common/crypto.h"
#include "common/logging.h"
#include "hora/errors.h"

namespace hora::bootstrap {

Identity ForeignStart::place() const {
  Identity id;
  id.rank = job_.rank;
  id.size = job_.size;
  if (id.size > 1) id.local_rank = id.local_size = id.cross_rank = id.cross_size = Identity::kDerive;
  return id;
}

RendezvousOptions ForeignStart::rendezvous() const {
  return job_.size == 1 ? RendezvousOptions{} : foreignRendezvous(env(), job_);
}

std::pair<Identity, RendezvousOptions> ForeignStart::join(ProcessState& process,
                                                          const CommunicatorOptions& options) const {
  const Identity id = identity();
  RendezvousOptions job = rendezvous();
  if (!job.launcher_kvs.empty()) job = process.throughLauncher(job, id.rank, options);
  return {id, process.nextCommunicator(job, id.rank)};
}

RendezvousOptions foreignRendezvous(const common::Env& env, const ForeignLaunch& job) {
  RendezvousOptions r;
  const std::string via = " (a job started by " + job.launcher + " without horarun)";
  if (!job.launcher_kvs.empty() && !env.isSet("HORA_RENDEZVOUS_ADDR") && !env.isSet("HORA_RENDEZVOUS_PORT")) {
    // Learned at the first Communicator (bootstrap/job/launcher_store.h).
    r.launcher_kvs = job.launcher_kvs;
    r.address = job.single_host ? "127.0.0.1" : "";
    r.port = 0;
    r.secret = env.getString("HORA_SECRET");
    r.serve_store = job.rank == 0;
    return r;
  }
  if (env.isSet("HORA_RENDEZVOUS_ADDR")) r.address = env.getString("HORA_RENDEZVOUS_ADDR");
  else if (job.single_host && job.launcher != "TF_CONFIG") r.address = "127.0.0.1";
  else if (!job.first_host.empty()) r.address = job.first_host;
  else
    throw InvalidArgumentError("HORA_RENDEZVOUS_ADDR is not set" + via + " and " + job.launcher +
                               " offers no key-value service to learn rank 0's address from (" +
                               (job.launcher == "OpenMPI" ? "PMIX_NAMESPACE" : "PMI_FD") +
                               " is not set): set it to the address of rank 0's host, e.g. mpirun -x HORA_RENDEZVOUS_ADDR=host0");
  if (env.isSet("HORA_RENDEZVOUS_PORT")) {
    r.port = static_cast<int>(env.getInt("HORA_RENDEZVOUS_PORT", 1, 65535));
  } else if (job.first_port != 0) {
    r.port = job.first_port;
  } else if (!job.job_id.empty()) {
    // Unprivileged, below the usual ephemeral range (32768+), spread by the job id.
    r.port = 20000 + static_cast<int>(std::hash<std::string>{}("hora-port:" + job.job_id) % 12000);
  } else {
    throw InvalidArgumentError("HORA_RENDEZVOUS_PORT is not set" + via +
                               " and this launcher names no job to derive it from: set it, e.g. mpirun -x HORA_RENDEZVOUS_PORT=29500");
  }
  if (env.isSet("HORA_SECRET")) {
    r.secret = env.getString("HORA_SECRET");
  } else {
    const std::string id = job.job_id + "@" + r.address + ":" + std::to_string(r.port);
    const common::Mac derived = common::hmacSha256("hora foreign job", {std::span(reinterpret_cast<const uint8_t*>(id.data()), id.size())});
    static constexpr char kHex[] = "0123456789abcdef";
    for (uint8_t b : derived) r.secret.append(1, kHex[b >> 4]).append(1, kHex[b & 15]);
    if (job.rank == 0)
      HORA_LOG(warn, "HORA_SECRET is not set{}: the rendezvous is keyed by the job id only; export a random "
               "HORA_SECRET to every rank (mpirun -x HORA_SECRET) to keep others out", via);
  }
  r.serve_store = job.rank == 0;
  return r;
}

}  // namespace hora::bootstrap
