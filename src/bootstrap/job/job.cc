#include "bootstrap/job/job.h"

#include <unistd.h>

#include <climits>

#include "bootstrap/job/elastic_join.h"
#include "bootstrap/job/foreign.h"
#include "bootstrap/job/horarun.h"
#include "bootstrap/job/mpi_launch.h"
#include "bootstrap/job/tf_config.h"
#include "bootstrap/knob_agreement.h"

namespace hora::bootstrap {

Identity JobStart::identity() const {
  Identity id = place();
  id.hostname = env_.getString("HORA_HOSTNAME");
  if (id.hostname.empty()) {
    char name[HOST_NAME_MAX + 1] = {};
    ::gethostname(name, sizeof(name) - 1);
    id.hostname = name;
  }
  id.validate();
  return id;
}

std::pair<Identity, RendezvousOptions> JobStart::join(ProcessState& process, const CommunicatorOptions&) const {
  const Identity id = identity();
  return {id, process.nextCommunicator(rendezvous(), id.rank)};
}

std::unique_ptr<JobStart> detectJobStart(const common::Env& env) {
  if (env.getBool("HORA_ELASTIC")) return std::make_unique<ElasticStart>(env);
  if (!env.isSet("HORA_SIZE")) {  // with HORA_SIZE, horarun (or the user) said everything
    if (auto job = detectMpiLaunch(env)) return std::make_unique<ForeignStart>(env, *job);
    if (env.isSet("TF_CONFIG")) return std::make_unique<ForeignStart>(env, parseTfConfig(env.getString("TF_CONFIG")));
  }
  if (env.isSet("HORA_SERVE_STORE")) return std::make_unique<RunnerStart>(env);
  return std::make_unique<HorarunStart>(env);
}

Identity identityFrom(const common::Env& env) { return detectJobStart(env)->identity(); }

RendezvousOptions rendezvousFrom(const common::Env& env) { return detectJobStart(env)->rendezvous(); }

Job resolveJob(const common::Env& env, const CommunicatorOptions& options) {
  Job job;
  std::tie(job.identity, job.rendezvous) = detectJobStart(env)->join(ProcessState::instance(), options);
  job.knobs = jobKnobs(env);
  return job;
}

}  // namespace hora::bootstrap

namespace hora {

Identity Identity::fromEnvironment() { return bootstrap::identityFrom(common::Env::fromProcess()); }

}  // namespace hora
