// Knob agreement (Note [knob agreement], common/knobs.h): the ranks of a job compare the knobs
// that must have one value on every rank, once, when the job's first communicator connects, so
// that a knob set on some hosts only fails at once, naming itself, rather than as a timeout in
// some later collective.
//
// Protocol, over the communicator's store (keys under its prefix): every rank sets
// "knobs/<rank>" to its jobKnobs(); rank 0 reads them all, compares and sets "knobs/verdict"
// ("" or the message); every rank reads the verdict. One write and one read per rank, n reads
// on rank 0; every wait ends at the connection's deadline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/knobs.h"
#include "rendezvous/store.h"

namespace hora::bootstrap {

// This rank's kJob knobs, one "NAME=value" line each, in registry order: the value the rank
// runs with (the default when unset), numbers written one way ("128M" and "134217728" agree).
std::string jobKnobs(const common::Env& env);

// "" when every rank's jobKnobs() (by rank) are equal; else one message naming each knob that
// differs, its values and the ranks holding each (as `label` numbers them).
std::string describeDisagreement(const std::vector<std::string>& by_rank, const std::function<int(int)>& label);

// Runs the protocol above; throws InvalidArgumentError with the message on every rank when the
// knobs differ, TimeoutError naming the missing rank when one never publishes.
void agreeOnKnobs(rendezvous::Store& store, const std::string& prefix, int rank, int size, const std::string& mine,
                  const std::function<int(int)>& label, const common::Deadline& deadline);

}  // namespace hora::bootstrap
