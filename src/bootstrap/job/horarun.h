// A job that horarun started, or one of the runners that set the same variables (hora.spark,
// hora.ray): HORA_RANK, HORA_SIZE, HORA_LOCAL_*, HORA_CROSS_* (or only rank and size, the rest
// derived from the hostnames), and the store at HORA_RENDEZVOUS_ADDR:HORA_RENDEZVOUS_PORT with
// the job secret HORA_SECRET. With HORA_SIZE unset too: a process on its own.
#pragma once

#include <utility>

#include "bootstrap/job/job.h"

namespace hora::bootstrap {

class HorarunStart : public JobStart {
 public:
  explicit HorarunStart(common::Env env) : JobStart(std::move(env)) {}
  RendezvousOptions rendezvous() const override;

 protected:
  Identity place() const override;
};

// The runners have no horarun to serve the store: their rank 0 does, told by HORA_SERVE_STORE=1.
class RunnerStart : public HorarunStart {
 public:
  using HorarunStart::HorarunStart;
  RendezvousOptions rendezvous() const override;
};

// The store horarun serves, from its three variables; InvalidArgumentError naming the first
// missing one, saying the job of `size` ranks needs it.
RendezvousOptions horarunStore(const common::Env& env, int size);

}  // namespace hora::bootstrap
