// horarun's own launcher for a job of fixed size: it serves the rendezvous store, starts every
// rank (worker_start.h), fails the job when a rank does not reach the store within
// --start-timeout, and waits for the job.
#pragma once

#include <map>
#include <string>

#include "launcher/flags.h"
#include "launcher/job_plan.h"

namespace hora::launcher {

// horarun's exit code: 0, or the first failed rank's (named on stderr).
int runStaticJob(const JobFlags& f, const JobPlan& plan, const std::map<std::string, std::string>& env);

}  // namespace hora::launcher
