// ElasticDriver: horarun's elastic mode (--min-np, --max-np, --host-discovery-script;
// docs/elastic.md). It serves the store for the whole job, starts a worker per slot of each
// usable host (locally, or one ssh with a host agent per remote host and batch of workers),
// answers the workers' joins with their place in each generation, polls the discovery script,
// and turns what it sees into ElasticPlanner events; the planner decides, this class does.
#pragma once

#include <map>
#include <string>

#include "launcher/flags.h"

namespace hora::launcher {

// Runs the elastic job; returns horarun's exit code (0 when training finished on a worker).
int runElasticJob(const JobFlags& flags, const std::map<std::string, std::string>& worker_env);

}  // namespace hora::launcher
