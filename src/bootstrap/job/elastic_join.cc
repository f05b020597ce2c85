#include "bootstrap/job/elastic_join.h"

#include <sstream>

#include "hora/errors.h"
#include "rendezvous/tcp_store.h"

namespace hora::bootstrap {

// Note [generations]: every communicator of generation g keeps its keys under "gen<g>/", and the
// TCP handshake between two ranks authenticates that prefix with the job secret (tcp_connect.cc),
// so a worker still holding generation g's addresses cannot be taken into generation g+1's ring:
// its connection fails the handshake and is dropped. Both sides also send their prefix in the
// clear, so the stale worker's error and the acceptor's log name both generations.
std::string generationPrefix(int generation) { return "gen" + std::to_string(generation) + "/"; }

std::string elasticJoinKey(const std::string& worker_id) { return "elastic/join/" + worker_id; }

std::string silentRankKey(const std::string& prefix, int rank) { return prefix + "silent/" + std::to_string(rank); }

std::string failureReportKey(const std::string& prefix, int rank) { return prefix + "failure/" + std::to_string(rank); }

std::string elasticAnswerKey(const std::string& worker_id, const std::string& nonce) {
  return "elastic/assign/" + worker_id + "/" + nonce;
}

ElasticPlace parsePlace(const std::string& answer, const std::string& worker_id) {
  if (answer.rfind("removed", 0) == 0) {
    const std::string why = answer.size() > 8 ? answer.substr(8) : "no reason given";
    throw WorkerRemovedError("elastic worker " + worker_id + " was removed from the job by horarun: " + why);
  }
  std::istringstream in(answer);
  ElasticPlace place;
  std::string rest;
  if (!(in >> place.generation >> place.rank >> place.size) || (in >> rest) || place.generation < 0 ||
      place.size < 1 || place.rank < 0 || place.rank >= place.size)
    throw PeerError("elastic worker " + worker_id + ": cannot read the driver's answer '" + answer +
                    "' (expected '<generation> <rank> <size>' or 'removed <why>')");
  return place;
}

ElasticPlace joinNextGeneration(rendezvous::Store& store, const std::string& worker_id,
                                const common::Deadline& deadline) {
  const std::string nonce = ProcessState::instance().nextJoinNonce();
  store.set(elasticJoinKey(worker_id), nonce, deadline);
  store.add(kElasticJoinCountKey, 1, deadline);
  std::string answer;
  try {
    answer = store.get(elasticAnswerKey(worker_id, nonce), deadline);
  } catch (const TimeoutError&) {
    throw TimeoutError("elastic worker " + worker_id + " was not placed in a generation within " +
                       std::to_string(deadline.timeout().count() / 1000) +
                       " s (HORA_ELASTIC_TIMEOUT_SECONDS): too few workers for --min-np, or horarun is gone");
  }
  return parsePlace(answer, worker_id);
}

RendezvousOptions ElasticStart::rendezvous() const {
  return horarunStore(env(), 2);  // any size > 1: the driver's store
}

std::pair<Identity, RendezvousOptions> ElasticStart::join(ProcessState&, const CommunicatorOptions&) const {
  RendezvousOptions job = rendezvous();
  const std::string worker = env().getString("HORA_ELASTIC_WORKER_ID");
  if (worker.empty())
    throw InvalidArgumentError("HORA_ELASTIC=1 needs HORA_ELASTIC_WORKER_ID; start the job with horarun");
  const auto timeout = std::chrono::seconds(env().getInt("HORA_ELASTIC_TIMEOUT_SECONDS", 1, 1 << 30));
  const auto deadline = common::Deadline::after(timeout);
  rendezvous::TcpStore store(job.address, job.port, job.secret, deadline);
  const ElasticPlace place = joinNextGeneration(store, worker, deadline);
  Identity identity = this->identity();
  identity.rank = place.rank;
  identity.size = place.size;
  identity.generation = place.generation;
  if (place.size > 1) {
    identity.local_rank = identity.local_size = identity.cross_rank = identity.cross_size = Identity::kDerive;
  } else {
    identity.local_rank = identity.cross_rank = 0;
    identity.local_size = identity.cross_size = 1;
  }
  job.prefix = generationPrefix(place.generation);
  job.announce_key = job.prefix + "started/" + std::to_string(place.rank);
  return {identity, job};
}

}  // namespace hora::bootstrap
