#include "collectives/group.h"

namespace hora::collectives {

Group::Group(bootstrap::Connection connection, const CommunicatorOptions& options)
    : connection_(std::move(connection)), options_(options) {
  shape_.size = connection_.size();
  shape_.shared_memory = connection_.shared_memory;
  shape_.even_hosts = connection_.topology.evenHosts();
  shape_.placed_by_host = connection_.topology.placedByHost();
}

Plan Group::plan(CollectiveKind op, size_t count, size_t bytes, ReduceOp reduce) const {
  return collectives::plan(op, count, bytes, reduce, shape_, options_);
}

std::string Group::describe(CollectiveKind op, const Plan& plan) const {
  return collectives::describe(op, plan, connection_.transport_name);
}

Context Group::next(CollectiveKind op, std::string_view name) {
  return Context{*connection_.transport, {++sequence_, static_cast<uint8_t>(op), name},
                 common::Deadline::after(options_.timeout), scratch_};
}

}  // namespace hora::collectives
