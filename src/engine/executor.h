// Executor: runs what the negotiation decided on this rank's Communicator: a fused group of
// allreduces (fusion.h) or one response of another collective, with its timeline events. It
// computes the output shapes of the collectives whose outputs the engine allocates
// (allgather, alltoall, reducescatter) from every rank's request.
//
// Thread safety: engine thread only.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/negotiation.h"
#include "engine/submission.h"
#include "engine/timeline.h"
#include "hora/communicator.h"

namespace hora::engine {

class Executor {
 public:
  // This rank's submission of a name, or null where this rank joined and stands in with zeros
  // (Note [join]).
  using FindMine = std::function<Submission*(const std::string& name)>;
  // Completes this rank's submission of a name, as soon as its output is in place.
  using Finish = std::function<void(const std::string& name, std::vector<int64_t> output_shape)>;

  Executor(Communicator& comm, Tracer& tracer, FindMine find_mine, Finish finish);

  // One allreduce for the whole group: in place for a group of one, else through the fusion
  // buffer.
  void allreduce(std::span<const Response> group);
  // A response of any other collective.
  void run(const Response& r);

 private:
  void allreduceFused(std::span<const Response> group, const std::string& args, const AllreduceOptions& o);
  void broadcast(Submission& mine);
  // Each of these returns the output shape it allocated.
  std::vector<int64_t> allgather(const Response& r, Submission& mine);
  std::vector<int64_t> alltoall(const Response& r, Submission& mine);
  std::vector<int64_t> reducescatter(Submission& mine);

  Communicator& comm_;
  Tracer& tracer_;
  const FindMine find_mine_;
  const Finish finish_;
  const int rank_, size_;
  std::vector<std::byte> fusion_;  // the fusion buffer, kept between cycles
};

}  // namespace hora::engine
