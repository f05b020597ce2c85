// The worker's side of an elastic job's membership (docs/elastic.md): before each generation a
// worker announces itself to the driver (horarun) through the store and waits to be placed.
//
// The driver answers each join with the generation's number and the worker's rank and size in
// it, or with `removed <why>`. The join is told apart from this process's earlier ones by a
// nonce, so an answer to an old join is never taken for the new one.
#pragma once

#include <string>
#include <utility>

#include "bootstrap/job/horarun.h"
#include "common/deadline.h"
#include "common/knobs.h"
#include "hora/identity.h"
#include "hora/options.h"
#include "rendezvous/store.h"

namespace hora::bootstrap {

struct ElasticPlace {
  int generation = 0;
  int rank = 0;
  int size = 1;
};

// Joins the next generation as `worker_id`, with a nonce from ProcessState. Throws
// WorkerRemovedError when the driver removed this worker, TimeoutError (naming the worker and the
// elastic timeout) when no answer came before `deadline`, PeerError for an answer that cannot be
// read.
ElasticPlace joinNextGeneration(rendezvous::Store& store, const std::string& worker_id,
                                const common::Deadline& deadline);

// An elastic worker (HORA_ELASTIC=1, HORA_ELASTIC_WORKER_ID), started by horarun with the
// variables of the place it starts in. rendezvous() is the driver's store; join() gives its
// identity and rendezvous in the next generation: its place from the driver, the local and cross
// ranks to be derived from the hostnames, the generation's key prefix.
class ElasticStart : public HorarunStart {
 public:
  using HorarunStart::HorarunStart;
  RendezvousOptions rendezvous() const override;
  std::pair<Identity, RendezvousOptions> join(ProcessState& process, const CommunicatorOptions& options) const override;
};

// The store's answer to one join, as the driver writes it: "<generation> <rank> <size>" or
// "removed <why>". Throws as joinNextGeneration does.
ElasticPlace parsePlace(const std::string& answer, const std::string& worker_id);

// The rendezvous prefix of a generation's communicator: nothing of another generation is found
// under it, and the peers' handshake proves it (Note [generations] in elastic_join.cc).
std::string generationPrefix(int generation);

// The keys of the contract, shared with the driver.
std::string elasticJoinKey(const std::string& worker_id);
// Where a rank that failed on a peer's silent heartbeat writes the verdict about rank `rank` of
// the communicator whose store prefix is `prefix`; horarun's elastic driver reads it.
std::string silentRankKey(const std::string& prefix, int rank);
// Where rank `rank` of that communicator leaves its failure report (Note [failure reports] in
// collectives/failure_report.h). The driver writes there too, for a member it stopped or saw
// killed: such a process never reports, and its peers then need not wait out the grace.
std::string failureReportKey(const std::string& prefix, int rank);
std::string elasticAnswerKey(const std::string& worker_id, const std::string& nonce);
inline constexpr const char* kElasticHostsUpdatedKey = "elastic/hosts_updated";
// Bumped by every join after its key is written: the driver reads the join keys when it changed.
inline constexpr const char* kElasticJoinCountKey = "elastic/joins";

}  // namespace hora::bootstrap
